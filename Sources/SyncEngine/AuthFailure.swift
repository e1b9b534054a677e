/// Why the server refused access (Simperium: spec "Authorizing: init"; Telepat: a 401).
public enum AuthFailure: Sendable, Hashable, CustomStringConvertible {
    /// 401: the token is affirmatively invalid; the user needs a new one.
    case invalidToken(message: String)
    /// 400: the token is not even well formed.
    case malformedToken(message: String)
    /// 500 or anything else: bucket name invalid, no permission, limits.
    case other(code: Int, message: String)

    /// From an HTTP-like status: 401 a bad token, 400 a malformed one, anything else other.
    public init(code: Int, message: String) {
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

/// Access to a bucket the server refused.
public struct BucketAuthFailure: Sendable, Hashable {
    public let bucket: String
    public let failure: AuthFailure

    public init(bucket: String, failure: AuthFailure) {
        self.bucket = bucket
        self.failure = failure
    }
}
