/// Why bytes from a peer are not an Apptimist frame or header, or why one cannot be rendered.
public enum ApptimistProtocolError: Error, Hashable, Sendable {
    /// Fewer bytes than the frame's two u32 length fields (the frame's size attached).
    case truncatedFrame(length: Int)
    /// A length field counts more bytes than follow it (field, its value, the bytes left).
    case lengthExceedsFrame(field: String, length: Int, available: Int)
    /// Bytes after the last field of a frame or header (how many).
    case trailingBytes(Int)
    /// The header ends inside a field (which field).
    case truncatedHeader(field: String)
    /// A version 2 data part too short to carry its 24-byte nonce (its length).
    case missingDataNonce(length: Int)
    /// A header version this implementation does not speak.
    case unsupportedVersion(UInt8)
    /// A header of another version than the connection negotiated (expected, found).
    case versionMismatch(expected: UInt8, found: UInt8)
    /// A PDU type the protocol does not define.
    case unknownType(UInt8)
    /// A field too long for its length prefix (field, its length, the prefix's maximum).
    case fieldTooLong(field: String, length: Int, maximum: Int)
    /// A fixed-size field (a key, a signature, a nonce) of another size (field, size, actual).
    case wrongFieldLength(field: String, expected: Int, actual: Int)
    /// The connection's header sequence would wrap: its nonces would repeat. Close it and reopen.
    case sequenceExhausted
}

extension ApptimistProtocolError: CustomStringConvertible {
    public var description: String {
        switch self {
        case .truncatedFrame(let length): return "truncated frame: \(length) bytes, fewer than its two 4-byte length fields"
        case .lengthExceedsFrame(let field, let length, let available):
            return "\(field) says \(length) bytes but only \(available) follow"
        case .trailingBytes(let count): return "\(count) bytes after the last field"
        case .truncatedHeader(let field): return "the header ends inside its field '\(field)'"
        case .missingDataNonce(let length): return "a version 2 data part of \(length) bytes cannot carry its 24-byte nonce"
        case .unsupportedVersion(let version): return "unsupported protocol version \(version)"
        case .versionMismatch(let expected, let found): return "a version \(found) header on a version \(expected) connection"
        case .unknownType(let type): return "unknown PDU type \(type)"
        case .fieldTooLong(let field, let length, let maximum): return "'\(field)' is \(length) bytes; at most \(maximum) fit"
        case .wrongFieldLength(let field, let expected, let actual): return "'\(field)' must be \(expected) bytes, not \(actual)"
        case .sequenceExhausted: return "the connection's header sequence is used up; reopen the connection"
        }
    }
}
