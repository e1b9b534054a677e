import JSONDiff

/// A message a client sends to the server.
public enum ClientMessage: Hashable, Sendable {
    /// `h:<n>`: heartbeat with the counter last received (or 0).
    case heartbeat(Int)
    /// `log:{json}`: a remote log record, an object with at least a `log` field.
    case log(JSONValue)
    /// `<channel>:<command>...`: a message for one bucket channel.
    case channel(Int, ChannelClientMessage)

    /// Parses a frame received from a client.
    public static func parse(_ text: String, maxBytes: Int = Frame.defaultMaxBytes) throws(ProtocolError) -> ClientMessage {
        try ClientMessage(frame: try Frame.parse(text, maxBytes: maxBytes))
    }

    /// Interprets an already split frame.
    public init(frame: Frame) throws(ProtocolError) {
        switch frame.command {
        case .heartbeat:
            if frame.channel != nil { throw .channelNotAllowed(.heartbeat) }
            guard let payload = frame.payload, !payload.isEmpty else { throw .missingPayload(.heartbeat) }
            guard let count = parseDecimal(payload) else { throw .invalidValue(field: "h", value: excerpt(payload)) }
            self = .heartbeat(count)
        case .log:
            if frame.channel != nil { throw .channelNotAllowed(.log) }
            guard let payload = frame.payload, !payload.isEmpty else { throw .missingPayload(.log) }
            self = .log(try parseJSON(payload))
        default:
            guard let channel = frame.channel else { throw .channelRequired(frame.command) }
            self = .channel(channel, try ChannelClientMessage(command: frame.command, payload: frame.payload))
        }
    }

    /// The frame for this message.
    public var frame: Frame {
        switch self {
        case .heartbeat(let count): return Frame(channel: nil, command: .heartbeat, payload: String(count))
        case .log(let record): return Frame(channel: nil, command: .log, payload: record.compactRendered())
        case .channel(let channel, let message):
            return Frame(channel: channel, command: message.command, payload: message.renderPayload())
        }
    }

    /// The text sent on the wire.
    public func render() -> String { frame.render() }
}

/// A client message on a bucket channel.
public enum ChannelClientMessage: Hashable, Sendable {
    /// `init:{json}`: authorize the channel.
    case initialize(InitRequest)
    /// `i:<data>:<mark>:<offset>:<limit>`: request an index page.
    case index(IndexRequest)
    /// `e:<key>.<version>`: request an entity version.
    case entity(key: String, version: Int)
    /// `cv:<cv>`: request the changes since a change version.
    case changeVersion(String)
    /// `c:{json}` or `c:[json,...]`: local changes.
    case changes([ChangeRequest])
    /// `index:{json}`: the answer to the server's `index` request.
    case indexReply(LocalIndex)

    /// The command this message is sent with.
    public var command: Command {
        switch self {
        case .initialize: return .initialize
        case .index: return .index
        case .entity: return .entity
        case .changeVersion: return .changeVersion
        case .changes: return .changes
        case .indexReply: return .remoteIndex
        }
    }

    /// Interprets the command and payload of a channel frame sent by a client.
    public init(command: Command, payload: String?) throws(ProtocolError) {
        switch command {
        case .auth, .heartbeat, .log:
            throw .unexpectedCommand(command)
        default:
            break
        }
        guard let payload, !payload.isEmpty else { throw .missingPayload(command) }
        switch command {
        case .initialize:
            self = .initialize(try InitRequest(payload: payload))
        case .index:
            self = .index(try IndexRequest(payload: payload))
        case .entity:
            let reference = try EntityReference(parsing: payload[...])
            try EntityKey.validate(reference.key)
            self = .entity(key: reference.key, version: reference.version)
        case .changeVersion:
            guard ChangeVersion.isValid(payload) else { throw .invalidValue(field: "cv", value: excerpt(payload)) }
            self = .changeVersion(payload)
        case .changes:
            self = .changes(try ChangeRequest.parseAll(payload: payload))
        case .remoteIndex:
            self = .indexReply(try LocalIndex(payload: payload))
        case .auth, .heartbeat, .log:
            throw .unexpectedCommand(command)
        }
    }

    /// The payload after `command:`.
    public func renderPayload() -> String {
        switch self {
        case .initialize(let request): return request.renderPayload()
        case .index(let request): return request.renderPayload()
        case .entity(let key, let version): return EntityReference(key: key, version: version).rendered
        case .changeVersion(let cv): return cv
        case .changes(let changes): return ChangeRequest.renderPayload(changes)
        case .indexReply(let index): return index.renderPayload()
        }
    }
}
