import JSONDiff

/// Parses `text` as JSON, turning a parser error into a `TelepatProtocolError`.
func parseTelepatJSON(_ text: some Collection<UInt8>) throws(TelepatProtocolError) -> JSONValue {
    do {
        return try JSONValue(parsing: text)
    } catch {
        throw .invalidJSON(error.description)
    }
}

/// Typed access to the fields of a JSON object, every mismatch a `TelepatProtocolError`.
/// Unknown fields are ignored; `null` counts as absent for optional fields.
struct TelepatFields {
    let object: JSONObject

    init(_ value: JSONValue, field: String) throws(TelepatProtocolError) {
        guard case .object(let object) = value else { throw .wrongType(field: field, expected: "a JSON object") }
        self.object = object
    }

    func present(_ key: String) -> JSONValue? {
        guard let value = object[JSONKey(key)], value != .null else { return nil }
        return value
    }

    func string(_ key: String) throws(TelepatProtocolError) -> String {
        guard let value = try optionalString(key) else { throw .missingField(key) }
        return value
    }

    /// A non-empty string.
    func name(_ key: String) throws(TelepatProtocolError) -> String {
        let value = try string(key)
        guard !value.isEmpty else { throw .invalidValue(field: key, value: "empty") }
        return value
    }

    func optionalString(_ key: String) throws(TelepatProtocolError) -> String? {
        guard let value = present(key) else { return nil }
        guard case .string(let string) = value else { throw .wrongType(field: key, expected: "a string") }
        return string
    }

    /// A string, or a number kept as its JSON text (ids are strings, but some clients send numbers).
    func optionalIdentifier(_ key: String) throws(TelepatProtocolError) -> String? {
        guard let value = present(key) else { return nil }
        switch value {
        case .string(let string):
            guard !string.isEmpty else { throw .invalidValue(field: key, value: "empty") }
            return string
        case .integer, .bigInteger: return value.compactRendered()
        default: throw .wrongType(field: key, expected: "a string")
        }
    }

    func object(_ key: String) throws(TelepatProtocolError) -> JSONObject {
        guard let value = try optionalObject(key) else { throw .missingField(key) }
        return value
    }

    func optionalObject(_ key: String) throws(TelepatProtocolError) -> JSONObject? {
        guard let value = present(key) else { return nil }
        guard case .object(let object) = value else { throw .wrongType(field: key, expected: "an object") }
        return object
    }

    func optionalArray(_ key: String) throws(TelepatProtocolError) -> [JSONValue]? {
        guard let value = present(key) else { return nil }
        guard case .array(let array) = value else { throw .wrongType(field: key, expected: "an array") }
        return array
    }

    /// A non-negative integer (an integral `2.0` too).
    func optionalCount(_ key: String) throws(TelepatProtocolError) -> Int? {
        guard let value = present(key) else { return nil }
        switch value {
        case .integer(let int) where int >= 0 && int <= Int64(Int32.max): return Int(int)
        case .double(let double) where double >= 0 && double <= Double(Int32.max) && double.rounded() == double:
            return Int(double)
        default: throw .wrongType(field: key, expected: "a non-negative integer")
        }
    }

    func optionalInt64(_ key: String) throws(TelepatProtocolError) -> Int64? {
        guard let value = present(key) else { return nil }
        guard case .integer(let int) = value else { throw .wrongType(field: key, expected: "an integer") }
        return int
    }

    /// A boolean; Telepat clients also send 0/1.
    func flag(_ key: String) throws(TelepatProtocolError) -> Bool {
        guard let value = present(key) else { return false }
        switch value {
        case .bool(let bool): return bool
        case .integer(let int) where int == 0 || int == 1: return int == 1
        default: throw .wrongType(field: key, expected: "a boolean")
        }
    }
}

extension JSONObject {
    /// `self` with `value` at `key` unless it is nil.
    func setting(_ key: String, _ value: JSONValue?) -> JSONObject {
        var copy = self
        if let value { copy[JSONKey(key)] = value }
        return copy
    }
}
