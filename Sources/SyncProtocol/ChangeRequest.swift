import JSONDiff

/// A change a client sends in `c` (spec "Sending Local Changes").
public struct ChangeRequest: Hashable, Sendable {
    /// The sending client; reference clients leave it out (the server knows it from `init`).
    public var clientID: String?
    /// The entity key.
    public var id: String
    /// Modify or remove.
    public var operation: ChangeOperation
    /// The jsondiff object diff from the `sv` version to the new one (modify only).
    public var diff: ObjectDiff?
    /// The version the diff applies to; nil for a create.
    public var sourceVersion: Int?
    /// The change id; a resend keeps it (DESIGN "Protocol facts").
    public var ccid: String
    /// The whole new object, sent after a 404/405/440 error.
    public var data: JSONObject?

    /// A change from its fields.
    public init(
        clientID: String? = nil, id: String, operation: ChangeOperation, diff: ObjectDiff? = nil,
        sourceVersion: Int? = nil, ccid: String, data: JSONObject? = nil
    ) {
        self.clientID = clientID
        self.id = id
        self.operation = operation
        self.diff = diff
        self.sourceVersion = sourceVersion
        self.ccid = ccid
        self.data = data
    }

    /// Parses one change object; the key and ccid must be valid.
    public init(json object: JSONObject) throws(ProtocolError) {
        let fields = JSONFields(object)
        self.clientID = try fields.optionalString("clientid")
        self.id = try fields.string("id")
        try EntityKey.validate(id)
        self.operation = try ChangeOperation(field: fields)
        self.diff = try fields.optionalDiff("v")
        self.sourceVersion = try fields.optionalVersion("sv")
        self.ccid = try fields.string("ccid")
        try ChangeID.validate(ccid)
        self.data = try fields.optionalObject("d")
    }

    /// Parses a client's `c` payload, which may be one change object or an array of them
    /// (DESIGN "Protocol facts"). Any invalid change fails the whole payload; servers that
    /// answer each change on its own use `outcomes(payload:)`.
    public static func parseAll(payload: String) throws(ProtocolError) -> [ChangeRequest] {
        var changes: [ChangeRequest] = []
        for element in try changeObjects(try parseJSON(payload)) {
            changes.append(try ChangeRequest(json: element))
        }
        return changes
    }

    /// Parses a client's `c` payload change by change: a malformed change becomes the error reply
    /// the server should send (400, or 440 for an undecodable diff) instead of failing the rest.
    /// Throws only when the payload as a whole is not JSON or not an object/array. A payload
    /// holding a lone surrogate escape is not JSON either, but it is a client's text, not a broken
    /// frame: each of its changes gets 400 (issue 13), none is applied, the connection stays.
    public static func outcomes(payload: String) throws(ProtocolError) -> [ChangeRequestOutcome] {
        let objects: [JSONObject]
        do {
            objects = try changeObjects(try parseJSON(payload))
        } catch {
            guard let refused = refusals(ofLoneSurrogatePayload: payload) else { throw error }
            return refused
        }
        var outcomes: [ChangeRequestOutcome] = []
        for object in objects {
            do throws(ProtocolError) {
                outcomes.append(.valid(try ChangeRequest(json: object)))
            } catch {
                outcomes.append(.invalid(rejection(for: object, error: error), error))
            }
        }
        return outcomes
    }

    /// Every change of a payload refused for a lone surrogate, or nil for any other payload.
    private static func refusals(ofLoneSurrogatePayload payload: String) -> [ChangeRequestOutcome]? {
        let refusal: ProtocolError
        do {
            _ = try JSONValue(parsing: payload)
            return nil
        } catch {
            guard error.kind == .loneSurrogate else { return nil }
            refusal = .invalidJSON(error.description)
        }
        guard let lenient = try? JSONValue(parsingReplacingLoneSurrogates: payload),
              let objects = try? changeObjects(lenient) else { return nil }
        return objects.map { .invalid(rejection(for: $0, error: refusal), refusal) }
    }

    /// The reply to a malformed change, echoing whatever identifying fields it had.
    private static func rejection(for object: JSONObject, error: ProtocolError) -> ChangeRejection {
        let code: ChangeErrorCode = if case .invalidDiff = error { .invalidDiff } else { .invalidRequest }
        return ChangeRejection(
            clientID: object["clientid"]?.stringValue,
            id: object["id"]?.stringValue ?? "",
            ccids: object["ccid"]?.stringValue.map { [$0] } ?? [],
            error: code
        )
    }

    /// The compact JSON object, fields in the reference clients' order.
    public func renderedJSON() -> String {
        var json = OrderedJSONObject()
        json.addIfPresent("clientid", string: clientID)
        json.add("id", string: id)
        json.add("o", string: operation.rawValue)
        if let diff { json.add("v", JSONDiffing.encode(diff)) }
        json.addIfPresent("sv", int: sourceVersion)
        json.add("ccid", string: ccid)
        json.addIfPresent("d", object: data)
        return json.rendered()
    }

    /// The `c` payload for `changes`: a single change as a bare object, as the reference
    /// clients send it (`c:{...}`), several as an array.
    public static func renderPayload(_ changes: [ChangeRequest]) -> String {
        renderPayload(rendered: changes.map { $0.renderedJSON() })
    }

    private static func renderPayload(rendered: [String]) -> String {
        if rendered.count == 1, let only = rendered.first { return only }
        return renderedArray(rendered)
    }

    /// `changes` as `c` frames on `channel`, in order, as few as keep each frame within
    /// `maxBytes` of UTF-8 (a server closes the connection on a bigger message). A change that
    /// makes a bigger frame on its own is left out, with the size of that frame.
    public static func frames(
        _ changes: [ChangeRequest], channel: Int, maxBytes: Int
    ) -> (frames: [String], tooLarge: [(change: ChangeRequest, frameBytes: Int)]) {
        let head = Frame(channel: channel, command: .changes, payload: "").render()
        var frames: [String] = []
        var tooLarge: [(change: ChangeRequest, frameBytes: Int)] = []
        var batch: [String] = []
        var batchBytes = 0
        // `[a,b,c]`: brackets and commas come to count + 1 bytes around several elements.
        func frameBytes(count: Int, elementBytes: Int) -> Int {
            head.utf8.count + elementBytes + (count == 1 ? 0 : count + 1)
        }
        func flush() {
            guard !batch.isEmpty else { return }
            frames.append(head + renderPayload(rendered: batch))
            batch.removeAll()
            batchBytes = 0
        }
        for change in changes {
            let json = change.renderedJSON()
            let bytes = json.utf8.count
            let alone = frameBytes(count: 1, elementBytes: bytes)
            if alone > maxBytes {
                tooLarge.append((change, alone))
                continue
            }
            if !batch.isEmpty && frameBytes(count: batch.count + 1, elementBytes: batchBytes + bytes) > maxBytes { flush() }
            batch.append(json)
            batchBytes += bytes
        }
        flush()
        return (frames, tooLarge)
    }

    private static func changeObjects(_ payload: JSONValue) throws(ProtocolError) -> [JSONObject] {
        switch payload {
        case .object(let object):
            return [object]
        case .array(let elements):
            var objects: [JSONObject] = []
            objects.reserveCapacity(elements.count)
            for element in elements {
                guard case .object(let object) = element else {
                    throw .wrongType(field: "c", expected: "an array of change objects")
                }
                objects.append(object)
            }
            return objects
        default:
            throw .wrongType(field: "c", expected: "a change object or an array of them")
        }
    }
}

/// One change of a client's `c` payload as a server sees it.
public enum ChangeRequestOutcome: Hashable, Sendable {
    /// A well-formed change.
    case valid(ChangeRequest)
    /// A malformed change: the rejection to send back (`clientid` may need filling in from the
    /// session) and why.
    case invalid(ChangeRejection, ProtocolError)
}

extension JSONFields {
    func optionalDiff(_ key: String) throws(ProtocolError) -> ObjectDiff? {
        guard let value = object[JSONKey(key)], value != .null else { return nil }
        guard case .object = value else { throw .wrongType(field: key, expected: "an object diff") }
        do {
            return try JSONDiffing.decode(value)
        } catch {
            throw .invalidDiff(excerpt(String(describing: error)))
        }
    }
}
