/// Conversion between diffs and their wire JSON (`{key: {"o": .., "v": ..}}`).
enum DiffCodec {
    static func decodeObjectDiff(_ json: JSONValue) throws(JSONDiffError) -> ObjectDiff {
        guard case .object(let members) = json else {
            throw .malformedOperation(path: [], reason: "an object diff must be an object, found \(json.typeName)")
        }
        var diff = ObjectDiff(minimumCapacity: members.count)
        for (key, value) in members {
            diff[key] = try at(key.string) { () throws(JSONDiffError) in try decodeOperation(value) }
        }
        return diff
    }

    static func decodeListDiff(_ json: JSONValue) throws(JSONDiffError) -> ListDiff {
        guard case .object(let members) = json else {
            throw .malformedOperation(path: [], reason: "a list diff must be an object, found \(json.typeName)")
        }
        var diff = ListDiff(minimumCapacity: members.count)
        for (key, value) in members {
            guard let index = decimalIndex(key.string) else {
                throw .malformedOperation(path: [key.string], reason: "list diff keys must be decimal indexes")
            }
            guard diff[index] == nil else {
                throw .malformedOperation(path: [key.string], reason: "index \(index) appears twice")
            }
            diff[index] = try at(key.string) { () throws(JSONDiffError) in try decodeOperation(value) }
        }
        return diff
    }

    /// A non-negative decimal index without sign or leading zeros (other spellings would make two
    /// keys name the same index).
    private static func decimalIndex(_ key: String) -> Int? {
        let utf8 = key.utf8
        guard let first = utf8.first, utf8.count <= 18 else { return nil }
        if first == UInt8(ascii: "0") { return utf8.count == 1 ? 0 : nil }
        guard utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) else { return nil }
        return Int(key)
    }

    static func decodeOperation(_ json: JSONValue) throws(JSONDiffError) -> DiffOp {
        guard case .object(let members) = json else {
            throw .malformedOperation(path: [], reason: "an operation must be an object, found \(json.typeName)")
        }
        guard case .string(let code)? = members["o"] else {
            throw .malformedOperation(path: [], reason: "an operation needs a string 'o'")
        }
        let value = members["v"]
        func required() throws(JSONDiffError) -> JSONValue {
            guard let value else { throw .malformedOperation(path: [], reason: "'\(code)' needs a 'v'") }
            return value
        }
        func text() throws(JSONDiffError) -> String {
            guard case .string(let delta) = try required() else {
                throw .malformedOperation(path: [], reason: "'\(code)' needs a string 'v'")
            }
            return delta
        }
        switch code {
        case "+": return .insert(try required())
        case "-": return .remove
        case "r": return .replace(try required())
        case "I":
            let amount = try required()
            switch amount {
            case .integer, .double: return .increment(amount)
            default: throw .malformedOperation(path: [], reason: "'I' needs a number 'v' within 64 bits")
            }
        case "O": return .object(try decodeObjectDiff(try required()))
        case "L": return .list(try decodeListDiff(try required()))
        case "d": return .stringDelta(try text())
        case "dL": return .listDelta(try text())
        default: throw .malformedOperation(path: [], reason: "unknown operation '\(code)'")
        }
    }

    static func encodeObjectDiff(_ diff: ObjectDiff) -> JSONValue {
        .object(diff.mapValues(encodeOperation))
    }

    static func encodeListDiff(_ diff: ListDiff) -> JSONValue {
        var members = JSONObject(minimumCapacity: diff.count)
        for (index, operation) in diff {
            members[JSONKey(String(index))] = encodeOperation(operation)
        }
        return .object(members)
    }

    static func encodeOperation(_ operation: DiffOp) -> JSONValue {
        let value: JSONValue?
        switch operation {
        case .insert(let inserted): value = inserted
        case .remove: value = nil
        case .replace(let replacement): value = replacement
        case .increment(let amount): value = amount
        case .object(let diff): value = encodeObjectDiff(diff)
        case .list(let diff): value = encodeListDiff(diff)
        case .stringDelta(let delta), .listDelta(let delta): value = .string(delta)
        }
        var members: JSONObject = ["o": .string(operation.code)]
        if let value { members["v"] = value }
        return .object(members)
    }
}
