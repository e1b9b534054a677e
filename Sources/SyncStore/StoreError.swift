import GRDB
import Glibc

/// Why a store operation failed.
public enum StoreError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The SQLite file could not be opened, migrated or written (message from SQLite).
    case database(String)
    /// The disk holding the store is full: the write did not happen (message from SQLite or
    /// the fsync), everything before it is intact.
    case diskFull(String)
    /// No bucket with this name exists in the store.
    case unknownBucket(String)
    /// No entity with this key exists in the bucket (or it is deleted locally).
    case unknownEntity(bucket: String, key: String)
    /// No local-only file with this name exists in the bucket.
    case unknownLocalFile(bucket: String, name: String)
    /// No pending change carries this ccid.
    case unknownChange(ccid: String)
    /// A value stored in the database could not be decoded (corrupt row).
    case corruptRow(String)
    /// The bucket still holds entities or local files.
    case bucketNotEmpty(String)
    /// The bucket holds nothing but removals the server has not acknowledged yet.
    case bucketAwaitsRemovals(String)
    /// The bytes are more than the file can hold (an entity's file past `SyncStore.entityFileLimit`).
    case tooLarge(String)
    /// The store was closed (`SyncStore.close()`) before this call.
    case closed

    public var description: String {
        switch self {
        case .database(let message): return "database error: \(message)"
        case .diskFull(let message): return "the store's disk is full: \(message)"
        case .unknownBucket(let name): return "unknown bucket \(name)"
        case .unknownEntity(let bucket, let key): return "unknown entity \(bucket)/\(key)"
        case .unknownLocalFile(let bucket, let name): return "unknown local file \(bucket)/\(name)"
        case .unknownChange(let ccid): return "unknown change \(ccid)"
        case .corruptRow(let message): return "corrupt row: \(message)"
        case .bucketNotEmpty(let name): return "bucket \(name) is not empty"
        case .bucketAwaitsRemovals(let name): return "bucket \(name) waits for the server to acknowledge removals"
        case .tooLarge(let what): return "too large: \(what)"
        case .closed: return "the store is closed"
        }
    }
}

extension StoreError {
    /// A GRDB or SQLite error as the store reports it.
    init(_ error: any Error) {
        if let error = error as? StoreError {
            self = error
        } else if let error = error as? DatabaseError, error.resultCode == .SQLITE_FULL {
            self = .diskFull(String(describing: error))
        } else {
            self = .database(String(describing: error))
        }
    }

    /// A failed system call on the store's files (`errno` set).
    static func system(_ what: String) -> StoreError {
        let code = errno
        let message = "\(what): \(String(cString: strerror(code)))"
        return code == ENOSPC || code == EDQUOT ? .diskFull(message) : .database(message)
    }
}
