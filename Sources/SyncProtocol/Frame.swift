/// One text frame of the streaming API: `[<channel>:]<command>[:<payload>]`.
///
/// The frame layer knows nothing about payloads; `ClientMessage` and `ServerMessage` give them
/// meaning. Servers parse a `Frame` first so that they can still answer on the right channel when
/// the payload turns out to be invalid.
public struct Frame: Hashable, Sendable {
    /// The default limit for `parse`: large enough for a full `i:1:::1000` page of big entities.
    public static let defaultMaxBytes = 16 * 1024 * 1024
    /// The largest frame a client sends. bucketfs's server takes no bigger one from a client (a
    /// bigger one closes the connection), and its clients split or hold back changes to stay
    /// within it. The protocol itself names no limit.
    public static let defaultMaxClientBytes = 4 * 1024 * 1024
    /// Channels are small counters; nine digits keeps the value well inside `Int`.
    static let maxChannelDigits = 9

    /// The channel prefix; nil for connection-wide frames (`h`, `log`).
    public var channel: Int?
    /// The command.
    public var command: Command
    /// Everything after `command:`; nil when the frame ends right after the command.
    public var payload: String?

    /// A frame from its parts.
    public init(channel: Int?, command: Command, payload: String?) {
        self.channel = channel
        self.command = command
        self.payload = payload
    }

    /// Splits a frame into channel, command and payload; payloads are not looked at.
    public static func parse(_ text: String, maxBytes: Int = defaultMaxBytes) throws(ProtocolError) -> Frame {
        let utf8 = text.utf8
        if utf8.isEmpty { throw .emptyFrame }
        if utf8.count > maxBytes { throw .frameTooLarge(limit: maxBytes) }

        let colon = UInt8(ascii: ":")
        let firstColon = utf8.firstIndex(of: colon)
        let head = text[text.startIndex..<(firstColon ?? text.endIndex)]

        if let command = Command(rawValue: String(head)) {
            return Frame(channel: nil, command: command, payload: payload(of: text, after: firstColon))
        }
        guard let channel = parseChannel(head) else {
            // `abc:init:{}` is a bad channel; `abc` or `abc:xyz` is an unknown command.
            if looksNumeric(head) || secondSegmentIsCommand(text, after: firstColon) {
                throw .badChannel(excerpt(head))
            }
            throw .unknownCommand(excerpt(head))
        }
        guard let firstColon else { throw .missingCommand }
        let commandStart = utf8.index(after: firstColon)
        let secondColon = utf8[commandStart...].firstIndex(of: colon)
        let commandText = text[commandStart..<(secondColon ?? text.endIndex)]
        if commandText.isEmpty { throw .missingCommand }
        guard let command = Command(rawValue: String(commandText)) else {
            throw .unknownCommand(excerpt(commandText))
        }
        return Frame(channel: channel, command: command, payload: payload(of: text, after: secondColon))
    }

    /// The frame as sent on the wire.
    public func render() -> String {
        var text = ""
        if let channel {
            text += String(channel)
            text += ":"
        }
        text += command.rawValue
        if let payload {
            text += ":"
            text += payload
        }
        return text
    }

    private static func payload(of text: String, after colon: String.Index?) -> String? {
        guard let colon else { return nil }
        return String(text[text.utf8.index(after: colon)...])
    }

    /// A canonical decimal: digits only, no sign, no leading zero (so render(parse(x)) == x).
    static func parseChannel(_ text: Substring) -> Int? {
        let utf8 = text.utf8
        guard !utf8.isEmpty, utf8.count <= maxChannelDigits else { return nil }
        guard utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) else { return nil }
        if utf8.count > 1 && utf8.first == UInt8(ascii: "0") { return nil }
        return Int(text)
    }

    private static func looksNumeric(_ text: Substring) -> Bool {
        guard let first = text.utf8.first else { return false }
        return (first >= UInt8(ascii: "0") && first <= UInt8(ascii: "9"))
            || first == UInt8(ascii: "-") || first == UInt8(ascii: "+")
    }

    private static func secondSegmentIsCommand(_ text: String, after colon: String.Index?) -> Bool {
        guard let colon else { return false }
        let rest = text[text.utf8.index(after: colon)...]
        let end = rest.utf8.firstIndex(of: UInt8(ascii: ":")) ?? rest.endIndex
        return Command(rawValue: String(rest[rest.startIndex..<end])) != nil
    }
}
