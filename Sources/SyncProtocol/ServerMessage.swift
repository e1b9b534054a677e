import JSONDiff

/// A message the server sends to a client.
public enum ServerMessage: Hashable, Sendable {
    /// `h:<n>`: heartbeat reply, the client's counter plus one.
    case heartbeat(Int)
    /// `log:<level>`: 0 stop remote logging, 1 normal, 2 verbose.
    case log(level: Int)
    /// `<channel>:<command>...`: a message for one bucket channel.
    case channel(Int, ChannelServerMessage)

    /// Parses a frame received from a server.
    public static func parse(_ text: String, maxBytes: Int = Frame.defaultMaxBytes) throws(ProtocolError) -> ServerMessage {
        try ServerMessage(frame: try Frame.parse(text, maxBytes: maxBytes))
    }

    /// Interprets an already split frame.
    public init(frame: Frame) throws(ProtocolError) {
        switch frame.command {
        case .heartbeat, .log:
            if frame.channel != nil { throw .channelNotAllowed(frame.command) }
            guard let payload = frame.payload, !payload.isEmpty else { throw .missingPayload(frame.command) }
            guard let value = parseDecimal(payload) else {
                throw .invalidValue(field: frame.command.rawValue, value: excerpt(payload))
            }
            self = frame.command == .heartbeat ? .heartbeat(value) : .log(level: value)
        default:
            guard let channel = frame.channel else { throw .channelRequired(frame.command) }
            self = .channel(channel, try ChannelServerMessage(command: frame.command, payload: frame.payload))
        }
    }

    /// The frame for this message.
    public var frame: Frame {
        switch self {
        case .heartbeat(let count): return Frame(channel: nil, command: .heartbeat, payload: String(count))
        case .log(let level): return Frame(channel: nil, command: .log, payload: String(level))
        case .channel(let channel, let message):
            return Frame(channel: channel, command: message.command, payload: message.renderPayload())
        }
    }

    /// The text sent on the wire.
    public func render() -> String { frame.render() }
}

/// A server message on a bucket channel.
public enum ChannelServerMessage: Hashable, Sendable {
    /// `auth:<username>`: the channel is authorized (the username must satisfy `Username.isValid`).
    case authOK(username: String)
    /// `auth:{"msg":..,"code":..}`: authorization failed (400 malformed token, 401 invalid, 500 other).
    case authError(code: Int, message: String)
    /// `i:{json}`: an index page.
    case index(IndexPage)
    /// `e:<key>.<version>\n<body>`: an entity version, or `?` if unknown.
    case entity(key: String, version: Int, EntityReply)
    /// `cv:?`: the requested change version is unknown; the client must re-index.
    case changeVersionUnknown
    /// `c:[...]`: applied changes and change errors.
    case changes([Change])
    /// `index`: the server asks for the client's local state.
    case indexRequest

    /// The command this message is sent with.
    public var command: Command {
        switch self {
        case .authOK, .authError: return .auth
        case .index: return .index
        case .entity: return .entity
        case .changeVersionUnknown: return .changeVersion
        case .changes: return .changes
        case .indexRequest: return .remoteIndex
        }
    }

    /// Interprets the command and payload of a channel frame sent by a server.
    public init(command: Command, payload: String?) throws(ProtocolError) {
        switch command {
        case .initialize, .heartbeat, .log:
            throw .unexpectedCommand(command)
        case .remoteIndex:
            if payload != nil { throw .unexpectedPayload(.remoteIndex) }
            self = .indexRequest
            return
        default:
            break
        }
        guard let payload, !payload.isEmpty else { throw .missingPayload(command) }
        switch command {
        case .auth:
            self = try Self.parseAuth(payload)
        case .index:
            self = .index(try IndexPage(payload: payload))
        case .entity:
            self = try Self.parseEntity(payload)
        case .changeVersion:
            guard payload == "?" else { throw .unexpectedPayload(.changeVersion) }
            self = .changeVersionUnknown
        case .changes:
            self = .changes(try Change.parseAll(payload: payload))
        case .initialize, .heartbeat, .log, .remoteIndex:
            throw .unexpectedCommand(command)
        }
    }

    /// The payload after `command:`; nil for `index`, which has none.
    public func renderPayload() -> String? {
        switch self {
        case .authOK(let username):
            return username
        case .authError(let code, let message):
            var json = OrderedJSONObject()
            json.add("msg", string: message)
            json.add("code", int: code)
            return json.rendered()
        case .index(let page):
            return page.renderPayload()
        case .entity(let key, let version, let reply):
            return EntityReference(key: key, version: version).rendered + "\n" + reply.rendered
        case .changeVersionUnknown:
            return "?"
        case .changes(let changes):
            return Change.renderPayload(changes)
        case .indexRequest:
            return nil
        }
    }

    /// Any `auth:` text that parses as JSON is a failure (DESIGN "Protocol facts"), so a JSON
    /// value that is not an error object is malformed rather than a username.
    private static func parseAuth(_ payload: String) throws(ProtocolError) -> ChannelServerMessage {
        guard let json = try? JSONValue(parsing: payload) else {
            if !Username.isValid(payload) { throw .invalidUsername(excerpt(payload)) }
            return .authOK(username: payload)
        }
        guard case .object(let object) = json else {
            throw .wrongType(field: "auth", expected: "a username or an error object")
        }
        let fields = JSONFields(object)
        let message = try fields.optionalString("msg") ?? ""
        let code: Int
        switch object["code"] {
        case .integer(let value)?:
            guard let int = Int(exactly: value) else { throw .invalidValue(field: "code", value: String(value)) }
            code = int
        case .string(let text)?:
            guard let int = parseDecimal(text) else { throw .invalidValue(field: "code", value: excerpt(text)) }
            code = int
        case nil, .null?:
            throw .missingField("code")
        default:
            throw .wrongType(field: "code", expected: "an integer")
        }
        return .authError(code: code, message: message)
    }

    private static func parseEntity(_ payload: String) throws(ProtocolError) -> ChannelServerMessage {
        guard let newline = payload.utf8.firstIndex(of: UInt8(ascii: "\n")) else {
            throw .missingPayload(.entity)
        }
        let reference = try EntityReference(parsing: payload[..<newline])
        if !EntityKey.isAcceptableFromServer(reference.key) { throw .invalidKey(excerpt(reference.key)) }
        let body = payload[payload.utf8.index(after: newline)...]
        if body.isEmpty { throw .missingPayload(.entity) }
        return .entity(key: reference.key, version: reference.version, try EntityReply(body: body))
    }
}
