/// Why a streaming-API frame could not be parsed (or a value failed a protocol validation).
public enum ProtocolError: Error, Hashable, Sendable {
    /// The frame had no bytes at all.
    case emptyFrame
    /// The frame is longer than the parser's byte limit.
    case frameTooLarge(limit: Int)
    /// The channel prefix is not a canonical non-negative decimal integer (offending text attached).
    case badChannel(String)
    /// A channel prefix with no command after it (`0` or `0::x`).
    case missingCommand
    /// The command is not one the streaming API defines.
    case unknownCommand(String)
    /// The command is defined but never travels in this direction (e.g. a client sending `auth`).
    case unexpectedCommand(Command)
    /// The command must be sent on a channel (`0:init:...`).
    case channelRequired(Command)
    /// The command is connection-wide and must not carry a channel (`h`, `log`).
    case channelNotAllowed(Command)
    /// The command needs a payload after `command:`.
    case missingPayload(Command)
    /// The command takes no payload (server `index`) or only a fixed one (server `cv:?`).
    case unexpectedPayload(Command)
    /// The payload is not valid JSON (the JSON parser's description attached).
    case invalidJSON(String)
    /// A JSON field (or the payload itself) has the wrong JSON type.
    case wrongType(field: String, expected: String)
    /// A required JSON field is absent.
    case missingField(String)
    /// A field has the right type but an unacceptable value.
    case invalidValue(field: String, value: String)
    /// An entity key outside `[A-Za-z0-9._%@-]{1,256}`.
    case invalidKey(String)
    /// A bucket name outside `[A-Za-z0-9._%-]{1,64}`.
    case invalidBucketName(String)
    /// A change id (ccid) that is empty, too long or not printable ASCII.
    case invalidChangeID(String)
    /// An access token that is not 32 or more ASCII alphanumerics (auth error 400).
    case malformedToken
    /// A username that is empty, has control characters, or would parse as JSON (auth ambiguity).
    case invalidUsername(String)
    /// A colon-separated payload (`i:data:mark:offset:limit`) with the wrong number of fields.
    case wrongFieldCount(Command, expected: Int, actual: Int)
    /// An `e` payload without the `.version` suffix.
    case missingVersion(String)
    /// A change's `v` is not a decodable jsondiff object diff.
    case invalidDiff(String)
}

extension ProtocolError: CustomStringConvertible {
    public var description: String {
        switch self {
        case .emptyFrame: return "empty frame"
        case .frameTooLarge(let limit): return "frame larger than \(limit) bytes"
        case .badChannel(let text): return "bad channel '\(text)'"
        case .missingCommand: return "missing command after channel"
        case .unknownCommand(let text): return "unknown command '\(text)'"
        case .unexpectedCommand(let command): return "command '\(command.rawValue)' not expected in this direction"
        case .channelRequired(let command): return "command '\(command.rawValue)' requires a channel"
        case .channelNotAllowed(let command): return "command '\(command.rawValue)' must not have a channel"
        case .missingPayload(let command): return "command '\(command.rawValue)' requires a payload"
        case .unexpectedPayload(let command): return "unexpected payload for command '\(command.rawValue)'"
        case .invalidJSON(let reason): return "invalid JSON: \(reason)"
        case .wrongType(let field, let expected): return "field '\(field)' must be \(expected)"
        case .missingField(let field): return "missing field '\(field)'"
        case .invalidValue(let field, let value): return "invalid value '\(value)' for '\(field)'"
        case .invalidKey(let key): return "invalid entity key '\(key)'"
        case .invalidBucketName(let name): return "invalid bucket name '\(name)'"
        case .invalidChangeID(let ccid): return "invalid change id '\(ccid)'"
        case .malformedToken: return "malformed access token"
        case .invalidUsername(let name): return "invalid username '\(name)'"
        case .wrongFieldCount(let command, let expected, let actual):
            return "command '\(command.rawValue)' takes \(expected) fields, got \(actual)"
        case .missingVersion(let text): return "missing '.version' in '\(text)'"
        case .invalidDiff(let reason): return "invalid diff: \(reason)"
        }
    }
}

/// Untrusted text quoted in an error, cut short so a huge frame cannot make a huge error.
@inline(__always)
func excerpt(_ text: some StringProtocol) -> String {
    let limit = 64
    if text.utf8.count <= limit { return String(text) }
    return String(text.prefix(limit)) + "..."
}
