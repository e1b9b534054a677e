/// The body of an Engine.IO 3 long-polling request or answer: several packets (each one
/// `EngineIOPacket` text) framed one after the other, in either of the two framings
/// engine.io-parser 1.x (the parser of socket.io-client 1.x, which Telepat's JS SDK 0.4 uses)
/// writes and reads:
///
/// - text (the client asked with `b64=1`): `<length>:<packet>` each; the packet travels as its
///   UTF-8 bytes, each byte one character (U+0000-U+00FF), and the length counts those; the
///   whole body is then sent as UTF-8. For ASCII that is the packet as is; for other text it is
///   UTF-8 twice, as engine.io-parser 1.x does (its `utf8encode`).
/// - binary (no `b64`): per packet a type byte (0: a text packet), the length as one byte per
///   decimal digit, 0xFF, then the packet's UTF-8 bytes.
///
/// Parsing takes either framing (the first byte tells them apart: a digit or 0/1) and, in the
/// text framing, also a packet sent once-encoded (engine.io-parser 2.x clients, and a length
/// that counts UTF-16 units), as engine.io's own `tryDecode` does.
public enum EngineIOPayload {
    public enum Framing: Hashable, Sendable {
        case text
        case binary
    }

    /// The body carrying `packets` (rendered packets, `EngineIOPacket.render()`).
    public static func render(_ packets: [String], framing: Framing) -> [UInt8] {
        var body: [UInt8] = []
        for packet in packets {
            let bytes = Array(packet.utf8)
            switch framing {
            case .text:
                body += Array(String(bytes.count).utf8) + [UInt8(ascii: ":")]
                // Each byte as the character of the same number, that character as UTF-8.
                for byte in bytes {
                    if byte < 0x80 {
                        body.append(byte)
                    } else {
                        body.append(0xC0 | (byte >> 6))
                        body.append(0x80 | (byte & 0x3F))
                    }
                }
            case .binary:
                body.append(0)
                body += String(bytes.count).utf8.map { $0 - UInt8(ascii: "0") }
                body.append(0xFF)
                body += bytes
            }
        }
        return body
    }

    /// The packets of a body, in order (each still to be parsed with `EngineIOPacket.parse`).
    /// An empty body holds none.
    public static func parse(_ body: [UInt8]) throws(TelepatProtocolError) -> [String] {
        guard let first = body.first else { return [] }
        return first <= 1 ? try parseBinary(body) : try parseText(body)
    }

    private static func parseBinary(_ body: [UInt8]) throws(TelepatProtocolError) -> [String] {
        var packets: [String] = []
        var index = 0
        while index < body.count {
            let kind = body[index]
            index += 1
            guard kind == 0 else {
                throw .malformedPacket(kind == 1 ? "binary Engine.IO packets are not used by Telepat" : "payload type byte \(kind)")
            }
            var length = 0
            var digits = 0
            while index < body.count, body[index] != 0xFF {
                guard body[index] <= 9, digits < 9 else { throw .malformedPacket("payload length digit \(body[index])") }
                length = length * 10 + Int(body[index])
                digits += 1
                index += 1
            }
            guard index < body.count, digits > 0 else { throw .malformedPacket("payload length without its end") }
            index += 1
            guard length <= body.count - index else { throw .malformedPacket("payload packet longer than the body") }
            guard let packet = String(validating: body[index..<index + length], as: UTF8.self) else {
                throw .malformedPacket("payload packet is not UTF-8")
            }
            if !packet.isEmpty { packets.append(packet) }
            index += length
        }
        return packets
    }

    private static func parseText(_ body: [UInt8]) throws(TelepatProtocolError) -> [String] {
        guard let text = String(validating: body, as: UTF8.self) else { throw .malformedPacket("payload is not UTF-8") }
        let units = Array(text.utf16)
        var packets: [String] = []
        var index = 0
        while index < units.count {
            var length = 0
            var digits = 0
            while index < units.count, units[index] != 0x3A /* : */ {
                let unit = units[index]
                guard (0x30...0x39).contains(unit), digits < 9 else {
                    throw .malformedPacket("payload length is not a number")
                }
                length = length * 10 + Int(unit - 0x30)
                digits += 1
                index += 1
            }
            guard index < units.count, digits > 0 else { throw .malformedPacket("payload length without ':'") }
            index += 1
            guard length <= units.count - index else { throw .malformedPacket("payload packet longer than the body") }
            let packetUnits = units[index..<index + length]
            index += length
            // An empty packet is skipped, as engine.io-parser does.
            if length > 0 { packets.append(try decodeTwice(packetUnits)) }
        }
        return packets
    }

    /// A text-framed packet: its characters as bytes decoded as UTF-8 when they are all below
    /// U+0100 and form UTF-8 (engine.io-parser 1.x's `utf8encode`), else the text itself.
    private static func decodeTwice(_ units: ArraySlice<UInt16>) throws(TelepatProtocolError) -> String {
        if units.allSatisfy({ $0 < 0x100 }), let decoded = String(validating: units.map { UInt8($0) }, as: UTF8.self) {
            return decoded
        }
        guard let text = String(validating: units, as: UTF16.self) else { throw .malformedPacket("payload packet is not text") }
        return text
    }
}
