/// How to diff a value (the reference's schema "policy"), overriding the type-based defaults.
///
/// JSON form: `{"otype": "integer"|"list"|"list_dmp"|"replace"|"string", "attributes": {key: policy},
/// "item": policy}`. As in the reference, an object without any of those three keys is read as a
/// bare attributes map (`{"a": {"otype": "integer"}}` is the policy of a document whose `a` is a counter).
public struct DiffPolicy: Sendable, Hashable {
    /// A diffing strategy that replaces the type-based default.
    public enum OperationType: String, Sendable, Hashable {
        /// `I`: numbers change by increments (commutes under concurrent edits).
        case integer
        /// `L`: arrays change by index-keyed operations.
        case list
        /// `dL`: arrays change as text, one compact JSON item per line.
        case listDMP = "list_dmp"
        /// `r`: always replace the whole value.
        case replace
        /// `d`: strings change by diff-match-patch deltas (the default for strings anyway).
        case string
    }

    public var operationType: OperationType?
    public var attributes: [JSONKey: DiffPolicy]
    /// The policy of each item of a list (with `operationType` `.list`).
    public var item: DiffPolicy? {
        get { itemStorage.first }
        set { itemStorage = newValue.map { [$0] } ?? [] }
    }
    /// Zero or one element: an array gives the recursive value the indirection it needs.
    private var itemStorage: [DiffPolicy] = []

    public init(operationType: OperationType? = nil, attributes: [JSONKey: DiffPolicy] = [:], item: DiffPolicy? = nil) {
        self.operationType = operationType
        self.attributes = attributes
        self.itemStorage = item.map { [$0] } ?? []
    }

    /// Reads the JSON form described on the type.
    public init(json: JSONValue) throws(JSONDiffError) {
        guard case .object(let members) = json else {
            throw .invalidPolicy(reason: "a policy must be an object, found \(json.typeName)")
        }
        let structural = members["otype"] != nil || members["attributes"] != nil || members["item"] != nil
        guard structural else {
            self.init(attributes: try Self.attributes(members))
            return
        }
        var operationType: OperationType?
        if let otype = members["otype"] {
            guard case .string(let name) = otype, let known = OperationType(rawValue: name) else {
                throw .invalidPolicy(reason: "unknown otype \(otype.compactRendered())")
            }
            operationType = known
        }
        var attributes: [JSONKey: DiffPolicy] = [:]
        if let value = members["attributes"] {
            guard case .object(let map) = value else {
                throw .invalidPolicy(reason: "attributes must be an object")
            }
            attributes = try Self.attributes(map)
        }
        let item = try members["item"].map { (value) throws(JSONDiffError) in try DiffPolicy(json: value) }
        self.init(operationType: operationType, attributes: attributes, item: item)
    }

    private static func attributes(_ map: JSONObject) throws(JSONDiffError) -> [JSONKey: DiffPolicy] {
        var result: [JSONKey: DiffPolicy] = [:]
        for (key, value) in map {
            result[key] = try DiffPolicy(json: value)
        }
        return result
    }

    /// The JSON form (always structural).
    public var json: JSONValue {
        var members = JSONObject()
        if let operationType { members["otype"] = .string(operationType.rawValue) }
        if !attributes.isEmpty { members["attributes"] = .object(attributes.mapValues(\.json)) }
        if let item { members["item"] = item.json }
        return .object(members)
    }
}
