import JSONDiff

/// Typed access to the fields of a JSON object payload, turning every mismatch into a
/// `ProtocolError`. Unknown fields are ignored; `null` counts as absent for optional fields.
struct JSONFields {
    let object: JSONObject

    init(_ object: JSONObject) {
        self.object = object
    }

    /// Parses a payload that must be a JSON object.
    init(parsing payload: String, field: String) throws(ProtocolError) {
        guard case .object(let object) = try parseJSON(payload) else {
            throw .wrongType(field: field, expected: "a JSON object")
        }
        self.object = object
    }

    private func present(_ key: String) -> JSONValue? {
        guard let value = object[JSONKey(key)], value != .null else { return nil }
        return value
    }

    func string(_ key: String) throws(ProtocolError) -> String {
        guard let value = try optionalString(key) else { throw .missingField(key) }
        return value
    }

    func optionalString(_ key: String) throws(ProtocolError) -> String? {
        guard let value = present(key) else { return nil }
        guard case .string(let string) = value else { throw .wrongType(field: key, expected: "a string") }
        return string
    }

    /// A string, or a number kept as its JSON text: clients send `"api": "1.1"` or `"api": 1`.
    func optionalStringOrNumber(_ key: String) throws(ProtocolError) -> String? {
        guard let value = present(key) else { return nil }
        switch value {
        case .string(let string): return string
        case .integer, .bigInteger, .double: return value.compactRendered()
        default: throw .wrongType(field: key, expected: "a string or number")
        }
    }

    func version(_ key: String) throws(ProtocolError) -> Int {
        guard let value = try optionalVersion(key) else { throw .missingField(key) }
        return value
    }

    /// A non-negative integer; an integral floating-point number (`2.0`) is accepted too.
    func optionalVersion(_ key: String) throws(ProtocolError) -> Int? {
        guard let value = present(key) else { return nil }
        guard let int = nonNegativeInt(value) else {
            throw .wrongType(field: key, expected: "a non-negative integer")
        }
        return int
    }

    func object(_ key: String) throws(ProtocolError) -> JSONObject {
        guard let value = try optionalObject(key) else { throw .missingField(key) }
        return value
    }

    func optionalObject(_ key: String) throws(ProtocolError) -> JSONObject? {
        guard let value = present(key) else { return nil }
        guard case .object(let object) = value else { throw .wrongType(field: key, expected: "an object") }
        return object
    }

    func array(_ key: String) throws(ProtocolError) -> [JSONValue] {
        guard let value = try optionalArray(key) else { throw .missingField(key) }
        return value
    }

    func optionalArray(_ key: String) throws(ProtocolError) -> [JSONValue]? {
        guard let value = present(key) else { return nil }
        guard case .array(let array) = value else { throw .wrongType(field: key, expected: "an array") }
        return array
    }

    func stringArray(_ key: String) throws(ProtocolError) -> [String] {
        var strings: [String] = []
        for element in try array(key) {
            guard case .string(let string) = element else {
                throw .wrongType(field: key, expected: "an array of strings")
            }
            strings.append(string)
        }
        return strings
    }

    /// Every element of an array field as an object, with the element's position in errors.
    func objects(_ key: String) throws(ProtocolError) -> [JSONFields] {
        guard let elements = try optionalArray(key) else { return [] }
        var result: [JSONFields] = []
        result.reserveCapacity(elements.count)
        for element in elements {
            guard case .object(let object) = element else {
                throw .wrongType(field: key, expected: "an array of objects")
            }
            result.append(JSONFields(object))
        }
        return result
    }
}

func parseJSON(_ text: String) throws(ProtocolError) -> JSONValue {
    do {
        return try JSONValue(parsing: text)
    } catch {
        throw .invalidJSON(error.description)
    }
}

func nonNegativeInt(_ value: JSONValue) -> Int? {
    switch value {
    case .integer(let int):
        return int >= 0 ? Int(exactly: int) : nil
    case .double(let double):
        guard double >= 0, double.rounded() == double, double < 9.0e18 else { return nil }
        return Int(exactly: double)
    default:
        return nil
    }
}

/// Builds a compact JSON object with fields in a fixed order (the order reference clients and
/// the spec's examples use), where `JSONValue.compactRendered` would sort them.
struct OrderedJSONObject {
    private var members = JSONMemberWriter()

    mutating func add(_ key: String, _ value: JSONValue) {
        members.key(key)
        members.value(value)
    }

    mutating func add(_ key: String, string value: String) {
        members.key(key)
        members.string(value)
    }

    mutating func add(_ key: String, int value: Int) {
        members.key(key)
        members.integer(value)
    }

    mutating func add(_ key: String, strings values: [String]) {
        members.key(key)
        members.strings(values)
    }

    mutating func add(_ key: String, raw json: String) {
        members.key(key)
        members.raw(json)
    }

    mutating func addIfPresent(_ key: String, string value: String?) {
        if let value { add(key, string: value) }
    }

    mutating func addIfPresent(_ key: String, int value: Int?) {
        if let value { add(key, int: value) }
    }

    mutating func addIfPresent(_ key: String, object value: JSONObject?) {
        if let value { add(key, .object(value)) }
    }

    func rendered() -> String { members.rendered() }
}

/// Renders `[a,b,c]` from already-rendered elements.
func renderedArray(_ elements: [String]) -> String {
    "[" + elements.joined(separator: ",") + "]"
}
