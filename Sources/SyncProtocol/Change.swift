import JSONDiff

/// One element of a server's `c` message: an applied change, or an error for a client's change.
public enum Change: Hashable, Sendable {
    /// A change the server applied (to be applied by every client, acknowledging its sender).
    case applied(AppliedChange)
    /// A client's change the server refused.
    case rejected(ChangeRejection)

    /// Parses one change object; an `error` field makes it a rejection.
    public init(json object: JSONObject) throws(ProtocolError) {
        if let error = object["error"], error != .null {
            self = .rejected(try ChangeRejection(json: object))
        } else {
            self = .applied(try AppliedChange(json: object))
        }
    }

    /// Parses a server's `c` payload: an array of changes (a bare object is accepted too).
    public static func parseAll(payload: String) throws(ProtocolError) -> [Change] {
        let elements: [JSONValue]
        switch try parseJSON(payload) {
        case .array(let array): elements = array
        case .object(let object): elements = [.object(object)]
        default: throw .wrongType(field: "c", expected: "an array of changes")
        }
        var changes: [Change] = []
        changes.reserveCapacity(elements.count)
        for element in elements {
            guard case .object(let object) = element else {
                throw .wrongType(field: "c", expected: "an array of change objects")
            }
            changes.append(try Change(json: object))
        }
        return changes
    }

    /// The compact JSON object.
    public func renderedJSON() -> String {
        switch self {
        case .applied(let change): return change.renderedJSON()
        case .rejected(let rejection): return rejection.renderedJSON()
        }
    }

    /// The `c` payload: always an array from the server (`c:[]` when up to date).
    public static func renderPayload(_ changes: [Change]) -> String {
        renderedArray(changes.map { $0.renderedJSON() })
    }
}

/// A change the server applied and broadcasts (spec "Change: c").
public struct AppliedChange: Hashable, Sendable {
    /// The client that made the change.
    public var clientID: String?
    /// The entity key.
    public var id: String
    /// Modify or remove.
    public var operation: ChangeOperation
    /// The diff from `sv` to `ev` (required for modify).
    public var diff: ObjectDiff?
    /// The entity version after the change (required for modify).
    public var endVersion: Int?
    /// The version the diff applies to; nil only for a create (DESIGN: sent on every non-create).
    public var sourceVersion: Int?
    /// The bucket's change version at this change.
    public var changeVersion: String
    /// The ccids this change covers (always sent, DESIGN "Protocol facts").
    public var ccids: [String]
    /// The whole object, when the server chooses to send it.
    public var data: JSONObject?

    /// A change from its fields.
    public init(
        clientID: String?, id: String, operation: ChangeOperation, diff: ObjectDiff?, endVersion: Int?,
        sourceVersion: Int? = nil, changeVersion: String, ccids: [String], data: JSONObject? = nil
    ) {
        self.clientID = clientID
        self.id = id
        self.operation = operation
        self.diff = diff
        self.endVersion = endVersion
        self.sourceVersion = sourceVersion
        self.changeVersion = changeVersion
        self.ccids = ccids
        self.data = data
    }

    /// Parses one applied change; a modify must have `v` and `ev`.
    public init(json object: JSONObject) throws(ProtocolError) {
        let fields = JSONFields(object)
        self.clientID = try fields.optionalString("clientid")
        self.id = try fields.string("id")
        if !EntityKey.isAcceptableFromServer(id) { throw .invalidKey(excerpt(id)) }
        self.operation = try ChangeOperation(field: fields)
        self.diff = try fields.optionalDiff("v")
        self.endVersion = try fields.optionalVersion("ev")
        self.sourceVersion = try fields.optionalVersion("sv")
        self.changeVersion = try fields.string("cv")
        self.ccids = try fields.stringArray("ccids")
        self.data = try fields.optionalObject("d")
        if operation == .modify {
            if diff == nil { throw .missingField("v") }
            if endVersion == nil { throw .missingField("ev") }
        }
    }

    /// The compact JSON object, fields in the spec example's order.
    public func renderedJSON() -> String {
        var json = OrderedJSONObject()
        json.addIfPresent("clientid", string: clientID)
        json.add("id", string: id)
        json.add("o", string: operation.rawValue)
        if let diff { json.add("v", JSONDiffing.encode(diff)) }
        json.addIfPresent("ev", int: endVersion)
        json.addIfPresent("sv", int: sourceVersion)
        json.add("cv", string: changeVersion)
        json.add("ccids", strings: ccids)
        json.addIfPresent("d", object: data)
        return json.rendered()
    }
}

/// The server's refusal of a client change: `{"clientid","id","ccids":[...],"error":<int>}`.
public struct ChangeRejection: Hashable, Sendable {
    /// The client whose change was refused.
    public var clientID: String?
    /// The entity key (as the client sent it; may be invalid, which is why it was refused).
    public var id: String
    /// The refused change ids.
    public var ccids: [String]
    /// The error code as sent; see `errorCode` for its meaning.
    public var code: Int
    /// A full object, if the server attaches one.
    public var data: JSONObject?

    /// A rejection from its fields.
    public init(clientID: String?, id: String, ccids: [String], code: Int, data: JSONObject? = nil) {
        self.clientID = clientID
        self.id = id
        self.ccids = ccids
        self.code = code
        self.data = data
    }

    /// A rejection with a known code.
    public init(clientID: String?, id: String, ccids: [String], error: ChangeErrorCode, data: JSONObject? = nil) {
        self.init(clientID: clientID, id: id, ccids: ccids, code: error.rawValue, data: data)
    }

    /// The meaning of `code`; nil for codes the spec does not define.
    public var errorCode: ChangeErrorCode? { ChangeErrorCode(code: code) }

    /// Parses a rejection; `error` may be an integer or, as in the spec's example, a numeric string.
    public init(json object: JSONObject) throws(ProtocolError) {
        let fields = JSONFields(object)
        self.clientID = try fields.optionalString("clientid")
        // The id is echoed back verbatim: it may be exactly the invalid key that was refused.
        self.id = try fields.string("id")
        self.ccids = try fields.stringArray("ccids")
        self.data = try fields.optionalObject("d")
        switch object["error"] {
        case .integer(let value)?:
            guard let code = Int(exactly: value) else { throw .invalidValue(field: "error", value: String(value)) }
            self.code = code
        case .string(let text)?:
            guard let code = parseDecimal(text) else { throw .invalidValue(field: "error", value: excerpt(text)) }
            self.code = code
        case nil, .null?:
            throw .missingField("error")
        default:
            throw .wrongType(field: "error", expected: "an integer error code")
        }
    }

    /// The compact JSON object; the code is always rendered as an integer.
    public func renderedJSON() -> String {
        var json = OrderedJSONObject()
        json.addIfPresent("clientid", string: clientID)
        json.add("id", string: id)
        json.add("ccids", strings: ccids)
        json.add("error", int: code)
        json.addIfPresent("d", object: data)
        return json.rendered()
    }
}
