/// One jsondiff operation on a value (the `{"o": .., "v": ..}` of the wire format).
public indirect enum DiffOp: Hashable, Sendable {
    /// `+`: add a key / insert a list item.
    case insert(JSONValue)
    /// `-`: remove a key / list item (no `v`).
    case remove
    /// `r`: replace the value.
    case replace(JSONValue)
    /// `I`: add this number to the numeric value.
    case increment(JSONValue)
    /// `O`: apply an object diff to the nested object.
    case object([JSONKey: DiffOp])
    /// `L`: apply a list diff (keys are indexes) to the nested array.
    case list([Int: DiffOp])
    /// `d`: apply a diff-match-patch delta to the string.
    case stringDelta(String)
    /// `dL`: apply a diff-match-patch delta to the array rendered one compact JSON item per line.
    case listDelta(String)

    /// The wire name of the operation (`o`).
    public var code: String {
        switch self {
        case .insert: return "+"
        case .remove: return "-"
        case .replace: return "r"
        case .increment: return "I"
        case .object: return "O"
        case .list: return "L"
        case .stringDelta: return "d"
        case .listDelta: return "dL"
        }
    }
}

/// A diff of an object: key to operation. Empty means "no change".
public typealias ObjectDiff = [JSONKey: DiffOp]

/// A diff of an array: index to operation, applied in ascending index order.
public typealias ListDiff = [Int: DiffOp]
