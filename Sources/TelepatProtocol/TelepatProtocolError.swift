/// Why a Telepat packet, request body, patch or notification could not be parsed.
public enum TelepatProtocolError: Error, Hashable, Sendable {
    /// An Engine.IO or Socket.IO packet with no bytes at all.
    case emptyPacket
    /// The packet's first character is not a type this protocol defines (offending text attached).
    case unknownPacketType(String)
    /// A Socket.IO packet whose namespace, ack id or attachment count is malformed.
    case malformedPacket(String)
    /// The text is not valid JSON (the JSON parser's description attached).
    case invalidJSON(String)
    /// A field (or the body itself, field "body") has the wrong JSON type.
    case wrongType(field: String, expected: String)
    /// A required field is absent (or null).
    case missingField(String)
    /// A field has the right type but an unacceptable value.
    case invalidValue(field: String, value: String)
}

extension TelepatProtocolError: CustomStringConvertible {
    public var description: String {
        switch self {
        case .emptyPacket: return "empty packet"
        case .unknownPacketType(let text): return "unknown packet type '\(text)'"
        case .malformedPacket(let text): return "malformed packet: \(text)"
        case .invalidJSON(let detail): return "invalid JSON: \(detail)"
        case .wrongType(let field, let expected): return "field '\(field)' must be \(expected)"
        case .missingField(let field): return "missing field '\(field)'"
        case .invalidValue(let field, let value): return "invalid value for '\(field)': \(value)"
        }
    }
}
