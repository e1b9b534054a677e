import JSONDiff

/// The Socket.IO events Telepat's socket carries, both directions.
public enum TelepatSocketEvent: Hashable, Sendable {
    /// Client to server: `bind_device` with the device's id and the application's.
    case bindDevice(deviceID: String, applicationID: String)
    /// Server to client: the device is bound; notifications follow.
    case ready
    /// Server to client: notifications.
    case message(TelepatNotification)
    /// Any other event (kept so that a peer can ignore it by name).
    case other(name: String, arguments: [JSONValue])

    public init(packet: SocketIOPacket) throws(TelepatProtocolError) {
        guard let (name, arguments) = packet.event else {
            throw .wrongType(field: "packet", expected: "a Socket.IO event")
        }
        switch name {
        case "bind_device":
            guard let argument = arguments.first else { throw .missingField("bind_device data") }
            let fields = try TelepatFields(argument, field: "bind_device")
            self = .bindDevice(deviceID: try fields.name("device_id"), applicationID: try fields.name("application_id"))
        case "ready":
            self = .ready
        case "message":
            guard let argument = arguments.first else { throw .missingField("message data") }
            self = .message(try TelepatNotification(parsing: argument))
        default:
            self = .other(name: name, arguments: arguments)
        }
    }

    /// Parses a whole Engine.IO text frame that must carry a Socket.IO event.
    public static func parse(frame text: String) throws(TelepatProtocolError) -> TelepatSocketEvent {
        guard case .message(let data) = try EngineIOPacket.parse(text) else {
            throw .wrongType(field: "frame", expected: "an Engine.IO message")
        }
        return try TelepatSocketEvent(packet: SocketIOPacket.parse(data))
    }

    public var packet: SocketIOPacket {
        switch self {
        case .bindDevice(let device, let application):
            return .event("bind_device", [.object(["device_id": .string(device), "application_id": .string(application)])])
        case .ready: return .event("ready", [.object([:])])
        case .message(let notification): return .event("message", [notification.json])
        case .other(let name, let arguments): return .event(name, arguments)
        }
    }

    /// The Engine.IO text frame carrying this event.
    public var frame: String { EngineIOPacket.message(packet.render()).render() }
}
