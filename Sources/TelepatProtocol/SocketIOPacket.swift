import JSONDiff

/// One Socket.IO packet (protocol 4, as Socket.IO 1.x and 2.x speak it) carried in an Engine.IO
/// message: `<type>[<attachments>-][/<namespace>,][<ack id>][<JSON data>]`.
public struct SocketIOPacket: Hashable, Sendable {
    public enum Kind: Int, Hashable, Sendable {
        case connect = 0, disconnect, event, ack, error, binaryEvent, binaryAck
    }

    public var kind: Kind
    /// `/` unless the packet names another one.
    public var namespace: String
    /// The acknowledgement id of an event that wants one, or of an ack.
    public var ackID: Int?
    /// The JSON data: for an event, an array whose first member is the event's name.
    public var data: JSONValue?
    /// How many binary attachments follow (binary kinds only; this module never reads them).
    public var attachments: Int

    public init(kind: Kind, namespace: String = "/", ackID: Int? = nil, data: JSONValue? = nil, attachments: Int = 0) {
        self.kind = kind
        self.namespace = namespace
        self.ackID = ackID
        self.data = data
        self.attachments = attachments
    }

    /// An event packet: `2["name", arguments...]`.
    public static func event(_ name: String, _ arguments: [JSONValue], namespace: String = "/", ackID: Int? = nil) -> SocketIOPacket {
        SocketIOPacket(kind: .event, namespace: namespace, ackID: ackID, data: .array([.string(name)] + arguments))
    }

    /// The event's name and arguments, for an event packet with a well-formed array.
    public var event: (name: String, arguments: [JSONValue])? {
        guard kind == .event || kind == .binaryEvent, case .array(let items)? = data,
              case .string(let name)? = items.first
        else { return nil }
        return (name, Array(items.dropFirst()))
    }

    /// Parses the data of an Engine.IO message.
    public static func parse(_ text: String) throws(TelepatProtocolError) -> SocketIOPacket {
        var rest = Substring(text)
        guard let first = rest.first else { throw .emptyPacket }
        guard let digit = first.wholeNumberValue, first.isASCII, let kind = Kind(rawValue: digit) else {
            throw .unknownPacketType(String(first))
        }
        rest = rest.dropFirst()
        var packet = SocketIOPacket(kind: kind)
        if kind == .binaryEvent || kind == .binaryAck {
            guard let dash = rest.firstIndex(of: "-"), let count = Int(rest[..<dash]), count >= 0,
                  rest[..<dash].allSatisfy({ $0.isASCII && $0.isNumber })
            else { throw .malformedPacket("binary packet without an attachment count") }
            packet.attachments = count
            rest = rest[rest.index(after: dash)...]
        }
        if rest.first == "/" {
            let end = rest.firstIndex(of: ",") ?? rest.endIndex
            packet.namespace = String(rest[..<end])
            rest = end == rest.endIndex ? rest[end...] : rest[rest.index(after: end)...]
        }
        let digits = rest.prefix { $0.isASCII && $0.isNumber }
        if !digits.isEmpty {
            guard digits.count <= 9, let id = Int(digits) else { throw .malformedPacket("ack id too long") }
            packet.ackID = id
            rest = rest.dropFirst(digits.count)
        }
        if !rest.isEmpty {
            packet.data = try parseTelepatJSON(Array(rest.utf8))
        }
        if kind == .event || kind == .binaryEvent {
            guard packet.event != nil else {
                throw .wrongType(field: "event", expected: "an array whose first member is the event name")
            }
        }
        return packet
    }

    public func render() -> String {
        var text = String(kind.rawValue)
        if kind == .binaryEvent || kind == .binaryAck { text += "\(attachments)-" }
        if namespace != "/" { text += namespace + "," }
        if let ackID { text += String(ackID) }
        if let data { text += data.compactRendered() }
        return text
    }
}
