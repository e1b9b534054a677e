/// Why a diff could not be decoded, applied or transformed. `path` locates the failing value
/// from the document root (object keys and list indexes, outermost first).
public enum JSONDiffError: Error, Sendable, Hashable, CustomStringConvertible {
    /// `-`, `r`, `I`, `O`, `L`, `d` or `dL` on a key the object does not have.
    case missingKey(path: [String])
    /// A list operation's index does not exist in the list (inserts may append, not go beyond).
    case indexOutOfRange(path: [String], index: Int, count: Int)
    /// A `d`/`dL` delta does not fit the current text (its `=`/`-` total differs from the text's
    /// UTF-16 length, or it is not a valid delta), or a `dL` result line is not JSON.
    case deltaDoesNotFit(path: [String], reason: String)
    /// The diff's JSON is not a valid jsondiff operation (unknown `o`, missing `v`, bad index key...).
    case malformedOperation(path: [String], reason: String)
    /// The operation needs another kind of value (e.g. `d` on a number).
    case typeMismatch(path: [String], operation: String, found: String)
    /// An `I` increment would leave the 64-bit integer range (or the operand is not a number).
    case numberOutOfRange(path: [String])
    /// A diff policy (schema) JSON is not in the expected format.
    case invalidPolicy(reason: String)

    /// The location of the failing value, outermost component first.
    public var path: [String] {
        switch self {
        case .missingKey(let path), .numberOutOfRange(let path),
             .indexOutOfRange(let path, _, _), .deltaDoesNotFit(let path, _),
             .malformedOperation(let path, _), .typeMismatch(let path, _, _):
            return path
        case .invalidPolicy:
            return []
        }
    }

    /// The same error one level further out: `component` is put in front of the path.
    func prefixed(_ component: String) -> JSONDiffError {
        switch self {
        case .missingKey(let path): return .missingKey(path: [component] + path)
        case .indexOutOfRange(let path, let index, let count):
            return .indexOutOfRange(path: [component] + path, index: index, count: count)
        case .deltaDoesNotFit(let path, let reason): return .deltaDoesNotFit(path: [component] + path, reason: reason)
        case .malformedOperation(let path, let reason):
            return .malformedOperation(path: [component] + path, reason: reason)
        case .typeMismatch(let path, let operation, let found):
            return .typeMismatch(path: [component] + path, operation: operation, found: found)
        case .numberOutOfRange(let path): return .numberOutOfRange(path: [component] + path)
        case .invalidPolicy: return self
        }
    }

    public var description: String {
        let location = "/" + path.joined(separator: "/")
        switch self {
        case .missingKey: return "\(location): key does not exist"
        case .indexOutOfRange(_, let index, let count): return "\(location): index \(index) out of range (count \(count))"
        case .deltaDoesNotFit(_, let reason): return "\(location): delta does not fit: \(reason)"
        case .malformedOperation(_, let reason): return "\(location): malformed diff: \(reason)"
        case .typeMismatch(_, let operation, let found): return "\(location): '\(operation)' cannot apply to \(found)"
        case .numberOutOfRange: return "\(location): number out of range"
        case .invalidPolicy(let reason): return "invalid diff policy: \(reason)"
        }
    }
}

/// Runs `body`; an error it throws gets `component` put in front of its path.
@inline(__always)
func at<T>(_ component: @autoclosure () -> String, _ body: () throws(JSONDiffError) -> T) throws(JSONDiffError) -> T {
    do {
        return try body()
    } catch {
        throw error.prefixed(component())
    }
}
