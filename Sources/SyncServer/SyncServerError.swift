/// Errors of the sync server's store and auth API.
public enum SyncServerError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The username is empty, too long, has control characters, or parses as JSON.
    case invalidUsername(String)
    /// The password is empty or too long.
    case invalidPassword
    /// `create` for a username that exists.
    case userExists(String)
    /// No such user.
    case unknownUser(String)
    /// The password does not match.
    case wrongPassword
    /// The bucket name is not `[A-Za-z0-9._%-]{1,64}`.
    case invalidBucketName(String)
    /// The data directory cannot be created or opened.
    case dataDirectory(path: String, reason: String)
    /// Stored data that should be valid JSON is not (never written by this server).
    case corruptRecord(String)
    /// A change could not be stored because its batch's transaction failed.
    case storage(String)
    /// A `--database` URL that is not `postgres://USER@HOST:PORT/DATABASE`.
    case databaseURL(String, String)
    /// The PostgreSQL database cannot be reached or migrated.
    case database(String)
    /// The PostgreSQL database does not answer now (stopped, restarting, unreachable, out of
    /// connections): the request may succeed later (the auth API answers 503, the streaming API
    /// closes the connection so the client comes back).
    case databaseUnavailable(String)

    public var description: String {
        switch self {
        case .invalidUsername(let name): return "invalid username \(name.debugDescription)"
        case .invalidPassword: return "invalid password"
        case .userExists(let name): return "user \(name.debugDescription) already exists"
        case .unknownUser(let name): return "unknown user \(name.debugDescription)"
        case .wrongPassword: return "wrong password"
        case .invalidBucketName(let name): return "invalid bucket name \(name.debugDescription)"
        case .dataDirectory(let path, let reason): return "data directory \(path): \(reason)"
        case .corruptRecord(let what): return "corrupt stored record: \(what)"
        case .storage(let reason): return "storage failure: \(reason)"
        case .databaseURL(let url, let reason): return "database URL \(url.debugDescription): \(reason)"
        case .database(let reason): return "database: \(reason)"
        case .databaseUnavailable(let reason): return "database unavailable: \(reason)"
        }
    }
}
