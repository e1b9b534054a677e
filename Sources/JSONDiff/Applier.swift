/// Strict application of diffs: every operation must fit the value it meets.
enum Applier {
    static func apply(_ diff: ObjectDiff, to object: JSONObject) throws(JSONDiffError) -> JSONObject {
        var result = object
        for (key, operation) in diff {
            try at(key.string) { () throws(JSONDiffError) in
                switch operation {
                case .insert(let value):
                    // On a key that exists, `+` replaces its value, as the Python reference and
                    // the Android and iOS clients apply it (issue 20); bucketfs itself writes `r`.
                    result[key] = value
                case .remove:
                    guard result.removeValue(forKey: key) != nil else { throw .missingKey(path: []) }
                default:
                    // Taken out first so the nested value is uniquely referenced while it changes.
                    guard let current = result.removeValue(forKey: key) else { throw .missingKey(path: []) }
                    result[key] = try apply(operation, to: current)
                }
            }
        }
        return result
    }

    static func apply(_ diff: ListDiff, to list: [JSONValue]) throws(JSONDiffError) -> [JSONValue] {
        let edits = try ListEdits(diff, count: list.count)
        var result: [JSONValue] = []
        result.reserveCapacity(list.count + diff.count)
        for index in 0...list.count {
            result.append(contentsOf: edits.gaps[index])
            guard index < list.count else { break }
            switch edits.items[index] {
            case nil: result.append(list[index])
            case .remove?: break
            case let operation?:
                result.append(try at(String(index)) { () throws(JSONDiffError) in try apply(operation, to: list[index]) })
            }
        }
        return result
    }

    /// Applies an operation that changes a value in place (everything but `+` and `-`).
    static func apply(_ operation: DiffOp, to value: JSONValue) throws(JSONDiffError) -> JSONValue {
        switch operation {
        case .replace(let replacement):
            return replacement
        case .increment(let amount):
            return try increment(value, by: amount)
        case .object(let diff):
            guard case .object(let object) = value else { throw mismatch(operation, value) }
            return .object(try apply(diff, to: object))
        case .list(let diff):
            guard case .array(let list) = value else { throw mismatch(operation, value) }
            return .array(try apply(diff, to: list))
        case .stringDelta(let delta):
            guard case .string(let text) = value else { throw mismatch(operation, value) }
            return .string(try TextDelta.apply(delta, to: text))
        case .listDelta(let delta):
            guard case .array(let list) = value else { throw mismatch(operation, value) }
            return .array(try TextDelta.applyListDelta(delta, to: list))
        case .insert, .remove:
            throw .malformedOperation(path: [], reason: "'\(operation.code)' only applies to a key or list index")
        }
    }

    /// `I`: integers add exactly (overflow is an error); a float on either side makes a float.
    static func increment(_ value: JSONValue, by amount: JSONValue) throws(JSONDiffError) -> JSONValue {
        switch (value, amount) {
        case (.integer(let base), .integer(let delta)):
            let (sum, overflow) = base.addingReportingOverflow(delta)
            guard !overflow else { throw .numberOutOfRange(path: []) }
            return .integer(sum)
        case (.integer, .double), (.double, .integer), (.double, .double):
            guard let base = value.doubleValue, let delta = amount.doubleValue else { throw .numberOutOfRange(path: []) }
            let sum = base + delta
            guard sum.isFinite else { throw .numberOutOfRange(path: []) }
            return .double(sum)
        case (.bigInteger, _), (_, .bigInteger):
            throw .numberOutOfRange(path: [])
        default:
            guard amount.doubleValue != nil else {
                throw .malformedOperation(path: [], reason: "'I' needs a number, found \(amount.typeName)")
            }
            throw mismatch(.increment(amount), value)
        }
    }

    private static func mismatch(_ operation: DiffOp, _ value: JSONValue) -> JSONDiffError {
        .typeMismatch(path: [], operation: operation.code, found: value.typeName)
    }
}
