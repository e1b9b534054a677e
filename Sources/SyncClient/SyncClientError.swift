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
