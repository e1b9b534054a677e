import SyncStore

/// Why a sync client call failed.
public enum SyncClientError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The local store refused the operation.
    case store(StoreError)
    /// The bucket is not configured on this client.
    case unknownBucket(String)
    /// The configuration cannot work (bad URL, bucket name, token).
    case invalidConfiguration(String)
    /// The client was stopped.
    case stopped
    /// The server could not be asked (offline, the bucket not in sync yet, no answer in time).
    case serverUnavailable(String)

    public var description: String {
        switch self {
        case .store(let error): return error.description
        case .unknownBucket(let name): return "bucket \(name) is not configured"
        case .invalidConfiguration(let reason): return "invalid configuration: \(reason)"
        case .stopped: return "sync client stopped"
        case .serverUnavailable(let reason): return "the server cannot be reached: \(reason)"
        }
    }
}

/// Why the server refused to authorize a channel (spec "Authorizing: init").
public enum AuthFailure: Sendable, Hashable, CustomStringConvertible {
    /// 401: the token is affirmatively invalid; the user needs a new one.
    case invalidToken(message: String)
    /// 400: the token is not even well formed.
    case malformedToken(message: String)
    /// 500 or anything else: bucket name invalid, no permission, limits.
    case other(code: Int, message: String)

    init(code: Int, message: String) {
        switch code {
        case 401: self = .invalidToken(message: message)
        case 400: self = .malformedToken(message: message)
        default: self = .other(code: code, message: message)
        }
    }

    public var description: String {
        switch self {
        case .invalidToken(let message): return "bad token (401): \(message)"
        case .malformedToken(let message): return "malformed token (400): \(message)"
        case .other(let code, let message): return "authorization failed (\(code)): \(message)"
        }
    }
}
