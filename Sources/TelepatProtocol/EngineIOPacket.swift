import JSONDiff

/// One Engine.IO protocol 3 packet as it travels in a WebSocket text frame, or one of a
/// long-polling body's packets (`EngineIOPayload` frames them): a one-digit type, then the
/// data. Binary packets are not used by Telepat.
public enum EngineIOPacket: Hashable, Sendable {
    /// `0{...}`: the server's handshake, first frame of a connection.
    case open(EngineIOHandshake)
    /// `1`: either side closes the session.
    case close
    /// `2` (optionally `2probe`): the client's heartbeat; answered by a pong with the same data.
    case ping(String)
    /// `3`: the answer to a ping.
    case pong(String)
    /// `4...`: a message; Socket.IO packets ride in it.
    case message(String)
    /// `5`: the client finishes a transport upgrade.
    case upgrade
    /// `6`: nothing (used to cut a polling cycle short).
    case noop

    /// Parses one text frame.
    public static func parse(_ text: String) throws(TelepatProtocolError) -> EngineIOPacket {
        guard let first = text.unicodeScalars.first else { throw .emptyPacket }
        let data = String(text.unicodeScalars.dropFirst())
        switch first {
        case "0": return .open(try EngineIOHandshake.parse(data))
        case "1": return .close
        case "2": return .ping(data)
        case "3": return .pong(data)
        case "4": return .message(data)
        case "5": return .upgrade
        case "6": return .noop
        default: throw .unknownPacketType(String(first))
        }
    }

    /// The text frame.
    public func render() -> String {
        switch self {
        case .open(let handshake): return "0" + handshake.render()
        case .close: return "1"
        case .ping(let data): return "2" + data
        case .pong(let data): return "3" + data
        case .message(let data): return "4" + data
        case .upgrade: return "5"
        case .noop: return "6"
        }
    }
}

/// The open packet's data: the session id and the heartbeat the client must keep.
public struct EngineIOHandshake: Hashable, Sendable {
    public var sessionID: String
    public var upgrades: [String]
    /// Milliseconds between the client's pings.
    public var pingInterval: Int
    /// Milliseconds either side waits for a ping or pong before it gives the connection up.
    public var pingTimeout: Int

    public init(sessionID: String, upgrades: [String] = [], pingInterval: Int, pingTimeout: Int) {
        self.sessionID = sessionID
        self.upgrades = upgrades
        self.pingInterval = pingInterval
        self.pingTimeout = pingTimeout
    }

    public static func parse(_ text: String) throws(TelepatProtocolError) -> EngineIOHandshake {
        let fields = try TelepatFields(parseTelepatJSON(Array(text.utf8)), field: "open")
        let upgrades = try (fields.optionalArray("upgrades") ?? []).map { (value) throws(TelepatProtocolError) -> String in
            guard case .string(let name) = value else { throw .wrongType(field: "upgrades", expected: "an array of strings") }
            return name
        }
        guard let interval = try fields.optionalCount("pingInterval") else { throw .missingField("pingInterval") }
        guard let timeout = try fields.optionalCount("pingTimeout") else { throw .missingField("pingTimeout") }
        return EngineIOHandshake(sessionID: try fields.name("sid"), upgrades: upgrades, pingInterval: interval, pingTimeout: timeout)
    }

    public func render() -> String {
        JSONValue.object([
            "sid": .string(sessionID),
            "upgrades": .array(upgrades.map { .string($0) }),
            "pingInterval": .integer(Int64(pingInterval)),
            "pingTimeout": .integer(Int64(pingTimeout)),
        ]).compactRendered()
    }
}
