import JSONDiff

/// A subscription's (or count's) `filters`: Telepat 0.4's query shape, a connector over
/// conditions on the objects' top-level keys.
///
///     {"and": [{"is": {"status": "open"}},
///              {"or": [{"range": {"priority": {"gte": 2}}}, {"like": {"title": "urgent"}}]},
///              {"not": {"exists": "archived"}}]}
///
/// - `and` / `or`: a non-empty array of clauses (conditions or nested connectors).
/// - `is`: `{key: value, ...}`, the key equals the value (numbers by value; a key holding an
///   array matches when one of its items equals).
/// - `like`: `{key: "text", ...}`, the key's value (a string, or a number or boolean written as
///   JSON) contains the text, ignoring case.
/// - `range`: `{key: {"gt"|"gte"|"lt"|"lte": bound, ...}, ...}`, every bound holds; numbers
///   compare with numbers, strings with strings (by Unicode scalars); anything else fails.
/// - `in_array`: `{key: [values]}`, the key equals one of the values (or, holding an array,
///   shares one).
/// - `exists`: a key, an array of keys, or `{"field": key}`: present and not null.
/// - `not`: one clause, negated.
///
/// As on Telepat, each key of an `is`, `like`, `range` or `in_array` is its own condition,
/// joined by the enclosing connector (in an `or`, `{"is": {"a": 1, "b": 2}}` is a OR b); a
/// clause directly under `not` joins its keys with `and`. An object without the key matches no
/// condition on it (so `not` of one matches it). Anything else is refused as malformed.
public indirect enum TelepatFilter: Hashable, Sendable {
    case all([TelepatFilter])
    case any([TelepatFilter])
    case not(TelepatFilter)
    case equals(key: String, value: JSONValue)
    case contains(key: String, text: String)
    case range(key: String, bounds: [Bound])
    case oneOf(key: String, values: [JSONValue])
    case exists(key: String)

    public enum Comparison: String, Hashable, Sendable, CaseIterable {
        case gt, gte, lt, lte
    }

    public struct Bound: Hashable, Sendable {
        public var comparison: Comparison
        public var value: JSONValue
    }

    /// Parses the `filters` of a request; the field name is `filters` in errors.
    public init(parsing json: JSONValue) throws(TelepatProtocolError) {
        let (name, operand) = try Self.single(json, field: "filters")
        guard name == "and" || name == "or" else {
            throw .invalidValue(field: "filters", value: "'\(name)' (expected and or or at the top)")
        }
        self = try Self.clause(name, operand, joinedBy: name)
    }

    /// Whether `object` passes.
    public func matches(_ object: JSONObject) -> Bool {
        switch self {
        case .all(let clauses): return clauses.allSatisfy { $0.matches(object) }
        case .any(let clauses): return clauses.contains { $0.matches(object) }
        case .not(let clause): return !clause.matches(object)
        case .equals(let key, let value):
            guard let current = object[JSONKey(key)] else { return false }
            if Self.same(current, value) { return true }
            return current.arrayValue?.contains { Self.same($0, value) } ?? false
        case .contains(let key, let text):
            guard let current = object[JSONKey(key)] else { return false }
            let haystack: String
            switch current {
            case .string(let string): haystack = string
            case .integer, .bigInteger, .double, .bool: haystack = current.compactRendered()
            default: return false
            }
            return text.isEmpty || haystack.lowercased().contains(text.lowercased())
        case .range(let key, let bounds):
            guard let current = object[JSONKey(key)] else { return false }
            return bounds.allSatisfy { bound in
                guard let order = Self.order(current, bound.value) else { return false }
                switch bound.comparison {
                case .gt: return order > 0
                case .gte: return order >= 0
                case .lt: return order < 0
                case .lte: return order <= 0
                }
            }
        case .oneOf(let key, let values):
            guard let current = object[JSONKey(key)] else { return false }
            let items = current.arrayValue ?? [current]
            return items.contains { item in values.contains { Self.same(item, $0) } }
        case .exists(let key):
            guard let current = object[JSONKey(key)] else { return false }
            return current != .null
        }
    }

    /// Equal as JSON, numbers by value (1 and 1.0 are the same).
    static func same(_ a: JSONValue, _ b: JSONValue) -> Bool {
        if a == b { return true }
        guard a.isNumber, b.isNumber, let x = a.doubleValue, let y = b.doubleValue else { return false }
        return x == y
    }

    /// How `a` compares with `b` (negative: before, 0: same, positive: after): numbers with
    /// numbers, strings with strings; nil otherwise.
    static func order(_ a: JSONValue, _ b: JSONValue) -> Int? {
        if a.isNumber, b.isNumber, let x = a.doubleValue, let y = b.doubleValue {
            return x < y ? -1 : x > y ? 1 : 0
        }
        if case .string(let x) = a, case .string(let y) = b {
            return x.unicodeScalars.lexicographicallyPrecedes(y.unicodeScalars) ? -1
                : y.unicodeScalars.lexicographicallyPrecedes(x.unicodeScalars) ? 1 : 0
        }
        return nil
    }

    // MARK: Parsing

    /// The one member of an object (`{"name": operand}`).
    private static func single(_ json: JSONValue, field: String) throws(TelepatProtocolError) -> (String, JSONValue) {
        guard let object = json.objectValue else { throw .wrongType(field: field, expected: "an object") }
        guard object.count == 1, let (key, value) = object.first else {
            throw .invalidValue(field: field, value: "an object with \(object.count) members (expected one: a connector or a condition)")
        }
        return (key.string, value)
    }

    /// A clause `name: operand` inside a connector named `connector`.
    private static func clause(_ name: String, _ operand: JSONValue, joinedBy connector: String) throws(TelepatProtocolError) -> TelepatFilter {
        let field = "filters.\(name)"
        switch name {
        case "and", "or":
            guard let items = operand.arrayValue, !items.isEmpty else { throw .wrongType(field: field, expected: "a non-empty array") }
            var clauses: [TelepatFilter] = []
            for item in items {
                let (inner, innerOperand) = try single(item, field: field)
                clauses.append(try clause(inner, innerOperand, joinedBy: name))
            }
            return name == "and" ? .all(clauses) : .any(clauses)
        case "not":
            let (inner, innerOperand) = try single(operand, field: field)
            return .not(try clause(inner, innerOperand, joinedBy: "and"))
        case "exists":
            let keys: [String]
            switch operand {
            case .string(let key): keys = [key]
            case .array(let items):
                keys = items.compactMap(\.stringValue)
                guard keys.count == items.count, !keys.isEmpty else { throw .wrongType(field: field, expected: "a key or an array of keys") }
            case .object(let object):
                guard object.count == 1, case .string(let key)? = object[JSONKey("field")] else {
                    throw .wrongType(field: field, expected: "a key, an array of keys or {\"field\": key}")
                }
                keys = [key]
            default: throw .wrongType(field: field, expected: "a key, an array of keys or {\"field\": key}")
            }
            return join(keys.map { .exists(key: $0) }, by: connector)
        case "is", "like", "range", "in_array":
            guard let members = operand.objectValue, !members.isEmpty else { throw .wrongType(field: field, expected: "an object of keys") }
            var conditions: [TelepatFilter] = []
            for (key, value) in members.sorted(by: { $0.key.string < $1.key.string }) {
                conditions.append(try condition(name, key: key.string, value: value, field: field + "." + key.string))
            }
            return join(conditions, by: connector)
        default:
            throw .invalidValue(field: "filters", value: "'\(name)' (expected and, or, not, is, like, range, in_array or exists)")
        }
    }

    private static func condition(_ name: String, key: String, value: JSONValue, field: String) throws(TelepatProtocolError) -> TelepatFilter {
        switch name {
        case "is":
            return .equals(key: key, value: value)
        case "like":
            guard case .string(let text) = value else { throw .wrongType(field: field, expected: "a string") }
            return .contains(key: key, text: text)
        case "in_array":
            guard let values = value.arrayValue else { throw .wrongType(field: field, expected: "an array") }
            return .oneOf(key: key, values: values)
        default:
            guard let limits = value.objectValue, !limits.isEmpty else { throw .wrongType(field: field, expected: "an object of bounds") }
            var bounds: [Bound] = []
            for (name, bound) in limits.sorted(by: { $0.key.string < $1.key.string }) {
                guard let comparison = Comparison(rawValue: name.string) else {
                    throw .invalidValue(field: field, value: "'\(name.string)' (expected gt, gte, lt or lte)")
                }
                guard bound.isNumber || bound.stringValue != nil else { throw .wrongType(field: field + "." + name.string, expected: "a number or a string") }
                bounds.append(Bound(comparison: comparison, value: bound))
            }
            return .range(key: key, bounds: bounds)
        }
    }

    /// Several conditions of one clause, joined as their connector joins clauses.
    private static func join(_ conditions: [TelepatFilter], by connector: String) -> TelepatFilter {
        if conditions.count == 1 { return conditions[0] }
        return connector == "or" ? .any(conditions) : .all(conditions)
    }
}

/// A subscription's `sort`: `{key: "asc"|"desc"}` (or `{key: {"order": "asc"|"desc"}}`), or an
/// array of those for ties, applied before `offset` and `limit`. Ascending, numbers sort before
/// strings, strings before booleans (false first), booleans before anything else; descending is
/// the reverse; objects without the key come last in either direction; ties keep their order
/// (by id).
public struct TelepatSort: Hashable, Sendable {
    public struct Key: Hashable, Sendable {
        public var name: String
        public var descending: Bool
    }

    public var keys: [Key]

    public init(parsing json: JSONValue) throws(TelepatProtocolError) {
        let items = json.arrayValue ?? [json]
        var keys: [Key] = []
        for item in items {
            guard let object = item.objectValue, !object.isEmpty else { throw .wrongType(field: "sort", expected: "an object of keys, or an array of them") }
            for (name, direction) in object.sorted(by: { $0.key.string < $1.key.string }) {
                let word = direction.stringValue ?? direction.objectValue?[JSONKey("order")]?.stringValue
                switch word?.lowercased() {
                case "asc": keys.append(Key(name: name.string, descending: false))
                case "desc": keys.append(Key(name: name.string, descending: true))
                default: throw .invalidValue(field: "sort.\(name.string)", value: "expected \"asc\" or \"desc\"")
                }
            }
        }
        guard !keys.isEmpty else { throw .wrongType(field: "sort", expected: "an object of keys, or an array of them") }
        self.keys = keys
    }

    /// `objects` in this order (stable).
    public func sorted(_ objects: [JSONObject]) -> [JSONObject] {
        objects.enumerated().sorted { a, b in
            for key in keys {
                let order = Self.compare(a.element[JSONKey(key.name)], b.element[JSONKey(key.name)], descending: key.descending)
                if order != 0 { return order < 0 }
            }
            return a.offset < b.offset
        }.map(\.element)
    }

    /// Missing values last whatever the direction; the rest by kind, then by value.
    private static func compare(_ a: JSONValue?, _ b: JSONValue?, descending: Bool) -> Int {
        switch (a, b) {
        case (nil, nil): return 0
        case (nil, _): return 1
        case (_, nil): return -1
        case (let x?, let y?):
            let (rankX, rankY) = (rank(x), rank(y))
            let order: Int
            if rankX != rankY {
                order = rankX < rankY ? -1 : 1
            } else if case .bool(let p) = x, case .bool(let q) = y {
                order = p == q ? 0 : (p ? 1 : -1)
            } else {
                order = TelepatFilter.order(x, y) ?? 0
            }
            return descending ? -order : order
        }
    }

    private static func rank(_ value: JSONValue) -> Int {
        if value.isNumber { return 0 }
        switch value {
        case .string: return 1
        case .bool: return 2
        default: return 3
        }
    }
}

extension JSONValue {
    fileprivate var isNumber: Bool {
        switch self {
        case .integer, .bigInteger, .double: return true
        default: return false
        }
    }
}
