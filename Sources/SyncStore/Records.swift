import JSONDiff

/// Nanoseconds since the Unix epoch; stored, so times survive restarts unchanged.
public typealias StoreTime = Int64

/// What the file system reports for an entity (xattr `user.bucketfs.state`).
public enum EntityState: Hashable, Sendable, CustomStringConvertible {
    /// Local value equals the last server version.
    case synced
    /// A local edit is waiting to be sent or acknowledged.
    case pending
    /// The last local write is not a JSON object; it is kept as bytes and not sent.
    case invalid
    /// Local and remote edits could not be merged automatically; the local value was kept.
    case conflict
    /// The server refused the change with this error code; the local value is kept.
    case rejected(code: Int)

    /// The text form used in the store and in xattrs (`rejected:413`).
    public var description: String {
        switch self {
        case .synced: return "synced"
        case .pending: return "pending"
        case .invalid: return "invalid"
        case .conflict: return "conflict"
        case .rejected(let code): return "rejected:\(code)"
        }
    }

    /// Parses the text form; nil for anything else.
    public init?(text: String) {
        switch text {
        case "synced": self = .synced
        case "pending": self = .pending
        case "invalid": self = .invalid
        case "conflict": self = .conflict
        default:
            guard text.hasPrefix("rejected:"), let code = Int(text.dropFirst("rejected:".count)) else { return nil }
            self = .rejected(code: code)
        }
    }
}

/// A bucket known to the store.
public struct BucketInfo: Hashable, Sendable {
    /// Stable id (never reused; usable as an inode number).
    public let id: Int64
    public let name: String
    /// The last change version fully applied; nil before the first complete index.
    public let cv: String?
    public let ctime: StoreTime
}

/// The last time a re-index found the server had lost changes of this store (restored from a
/// backup): when, and how many notes' changes and removals were sent again.
public struct ServerLoss: Hashable, Sendable, Codable {
    public let detectedAt: StoreTime
    public let notes: Int
}

/// One entity as the store holds it.
public struct EntityInfo: Hashable, Sendable {
    /// The entity's own stable id (its changes refer to it).
    public let id: Int64
    /// The inode number of its file: moves with the file on rename, new when a removed file
    /// is made again (never reused).
    public let nodeID: Int64
    public let bucket: String
    public let key: String
    /// The last server version this client knows (the ghost's version); nil if never on the server.
    public let version: Int?
    /// The last server data (the ghost); empty for an entity not yet on the server.
    public let ghost: JSONObject
    /// The local working value: the last valid local save, rebased over remote changes.
    public let value: JSONObject?
    /// The bytes the file shows: exactly what was last written locally, or the rendered value.
    public let content: [UInt8]
    public let mtime: StoreTime
    public let ctime: StoreTime
    public let state: EntityState
    /// Why the state is not `synced` (parse error, server error code text, conflict note).
    public let reason: String?
    /// Deleted locally; the removal is waiting for the server.
    public let deletedPending: Bool
    /// The file's permission bits and access time, when set (chmod, touch -a).
    public var mode: Int64? = nil
    public var atime: Int64? = nil
}

extension EntityInfo {
    /// A change of it waits for the server's acknowledgement (a save, a removal, a merged
    /// conflict being sent); invalid and refused ones wait for the user instead.
    public var awaitsServer: Bool {
        deletedPending || state == .pending || state == .conflict
    }

    /// The entity's file as a directory listing shows it.
    var directoryEntry: DirectoryEntry {
        DirectoryEntry(id: nodeID, name: .entity(key: key), size: content.count, mtime: mtime, ctime: ctime, mode: mode, atime: atime)
    }
}

/// A local-only file (editor scratch names): kept as bytes, never sent.
public struct LocalFileInfo: Hashable, Sendable {
    public let id: Int64
    public let bucket: String
    public let name: String
    public let content: [UInt8]
    public let mtime: StoreTime
    public let ctime: StoreTime
}

/// A name inside a bucket directory: an entity key or a local-only file name.
public enum EntryName: Hashable, Sendable {
    case entity(key: String)
    case localFile(name: String)

    /// Names are equal by their bytes (as `JSONKey`s are): `café` composed and decomposed are
    /// two files and two keys, where String's equality would take them for one.
    public static func == (lhs: EntryName, rhs: EntryName) -> Bool {
        switch (lhs, rhs) {
        case (.entity(let a), .entity(let b)), (.localFile(let a), .localFile(let b)): return exactlyEqual(a, b)
        default: return false
        }
    }

    public func hash(into hasher: inout Hasher) {
        switch self {
        case .entity(let key): hasher.combine(0); hasher.combine(JSONKey(key))
        case .localFile(let name): hasher.combine(1); hasher.combine(JSONKey(name))
        }
    }

    public var isEntity: Bool {
        if case .entity = self { return true }
        return false
    }
}

/// One row of a bucket listing.
public struct DirectoryEntry: Hashable, Sendable {
    /// The file's inode number (an entity's `nodeID`, a local file's id).
    public let id: Int64
    public let name: EntryName
    public let size: Int
    public let mtime: StoreTime
    public let ctime: StoreTime
    /// Permission bits (chmod) and access time (touch -a); nil: the defaults.
    public var mode: Int64? = nil
    public var atime: StoreTime? = nil
}

/// What a rename did.
public struct RenameResult: Hashable, Sendable {
    /// The changes ready to send (a save of the target, a removal of a renamed entity).
    public let changes: [OutgoingChange]
    /// The target as it now is.
    public let destination: DirectoryEntry
    /// The target's bytes went in unparsed (`SyncStore.finishDeferredParse` does the rest).
    public var parsedLater = false
}

/// Where an outgoing change is in its life.
public enum ChangeState: Hashable, Sendable, CustomStringConvertible {
    /// Recorded, not yet written to a connection.
    case queued
    /// Written to a connection at least once; resends keep the ccid.
    case sent
    /// Refused by the server with this code; not resent.
    case rejected(code: Int)

    public var description: String {
        switch self {
        case .queued: return "queued"
        case .sent: return "sent"
        case .rejected(let code): return "rejected:\(code)"
        }
    }

    init?(text: String) {
        switch text {
        case "queued": self = .queued
        case "sent": self = .sent
        default:
            guard text.hasPrefix("rejected:"), let code = Int(text.dropFirst("rejected:".count)) else { return nil }
            self = .rejected(code: code)
        }
    }
}

/// The operation an outgoing change carries.
public enum OutgoingOperation: Hashable, Sendable {
    /// `o: "M"` with `v` = the encoded jsondiff object diff.
    case modify(diff: JSONObject)
    /// `o: "-"`.
    case remove
}

/// A local change waiting for the server (one per entity at a time).
public struct OutgoingChange: Hashable, Sendable {
    public let bucket: String
    public let key: String
    public let entityID: Int64
    /// Kept across resends and restarts so the server can deduplicate (409).
    public let ccid: String
    /// The version the diff applies to; nil creates the entity.
    public let sourceVersion: Int?
    public let operation: OutgoingOperation
    /// The whole object, sent as `d` after a 440 (or a 404 re-create).
    public let fullData: JSONObject?
    public let state: ChangeState
    /// The ghost the diff applies to and the value it brings about, when the store has just
    /// computed it (`reconcileQueue`): what `markSent` remembers for applying its echo. Not part
    /// of the change's identity.
    var basis = NotCompared<SentChanges.Sent?>(nil)
    /// The bytes of the change's diff and whole object as the store keeps them (compact JSON, as
    /// a request carries them): fewer than its request takes, known without rendering it.
    var storedBytes = NotCompared<Int>(0)

    /// At least the bytes of this change's request on the wire: a change of a note of several
    /// MiB that cannot fit a message is known so before it is decoded and rendered (issue 37:
    /// that took most of a mount's time while big notes were saved).
    public var leastRequestBytes: Int { storedBytes.value }
    /// The change's diff and whole object are the store's alone (a placeholder stands for them
    /// here): a change of a note of a MiB or more is handed over so (`reconcileQueue`), and one
    /// too large to send is read back so (`markSent`'s `decodingAtMost`). Decoded, a note of
    /// many small keys takes ten times its bytes: twelve of them waiting to be sent took GiBs.
    public var leftInStore: Bool { diffLeftInStore.value }
    var diffLeftInStore = NotCompared(false)

    func marked(_ state: ChangeState) -> OutgoingChange {
        OutgoingChange(
            bucket: bucket, key: key, entityID: entityID, ccid: ccid, sourceVersion: sourceVersion, operation: operation,
            fullData: fullData, state: state, basis: basis, storedBytes: storedBytes, diffLeftInStore: diffLeftInStore)
    }
}

/// A value carried beside a record's fields that its equality and hash leave out.
struct NotCompared<Value: Sendable>: Hashable, Sendable {
    let value: Value

    init(_ value: Value) {
        self.value = value
    }

    static func == (lhs: Self, rhs: Self) -> Bool { true }

    func hash(into hasher: inout Hasher) {}
}

/// A change received from the server (`c` message element without an error).
public struct RemoteChange: Hashable, Sendable {
    public enum Operation: Hashable, Sendable {
        /// Apply this encoded jsondiff object diff.
        case modify(diff: JSONObject)
        case remove
    }
    public let key: String
    public let operation: Operation
    public let sourceVersion: Int?
    public let endVersion: Int?
    public let cv: String?
    public let clientID: String?
    public let ccids: [String]
    /// The whole resulting object when the server includes it.
    public let data: JSONObject?

    public init(
        key: String, operation: Operation, sourceVersion: Int?, endVersion: Int?, cv: String?,
        clientID: String? = nil, ccids: [String] = [], data: JSONObject? = nil
    ) {
        self.key = key
        self.operation = operation
        self.sourceVersion = sourceVersion
        self.endVersion = endVersion
        self.cv = cv
        self.clientID = clientID
        self.ccids = ccids
        self.data = data
    }
}

/// One element of an index page (`i` response).
public struct IndexEntry: Hashable, Sendable {
    public let key: String
    public let version: Int
    /// Present when the index was requested with data (`i:1:...`).
    public let data: JSONObject?

    public init(key: String, version: Int, data: JSONObject?) {
        self.key = key
        self.version = version
        self.data = data
    }
}

/// An entity the engine must fetch with `e` (missing data, version mismatch, unknown key).
public struct ReloadRequest: Hashable, Sendable {
    public let key: String
    /// The version to ask for (`e:key.version`).
    public let version: Int?

    public init(key: String, version: Int?) {
        self.key = key
        self.version = version
    }
}

/// What a remote-applying transaction decided, for the engine to act on.
public struct RemoteOutcome: Sendable, Equatable {
    /// Entities to fetch with `e`.
    public var reloads: [ReloadRequest] = []
    /// ccids of our own changes the server acknowledged.
    public var acknowledged: [String] = []
    /// Changes now ready to send (next coalesced edit after an ack, rebased resends).
    public var readyToSend: [OutgoingChange] = []
    /// Remote changes that touched files (also published on `remoteEvents`).
    public var events: [RemoteEvent] = []
    /// Keys whose acknowledged changes the server no longer has (it was restored from a backup
    /// older than them), found by a re-index after `cv:?`: their values are sent again.
    public var lostOnServer: [String] = []

    public init() {}

    /// Records a change as ready; a later version of the same change (same ccid, recomputed
    /// over a newer ghost within one batch) replaces the earlier one, so it is sent once.
    mutating func ready(_ change: OutgoingChange) {
        readyToSend.removeAll { $0.ccid == change.ccid }
        readyToSend.append(change)
    }
}

/// An entity changed because of the server; the file system invalidates its caches.
public struct RemoteEvent: Hashable, Sendable {
    public enum Kind: Hashable, Sendable {
        case created
        case changed
        case removed
    }
    public let bucket: String
    public let key: String
    public let entityID: Int64
    /// The inode number of the entity's file (`EntityInfo.nodeID`).
    public let nodeID: Int64
    public let kind: Kind
    /// The entity's server version after the change (nil when unknown, e.g. removed by an index).
    public let version: Int?
    /// The client that made the change, when the server said (`clientid`; nil for index and `e` loads).
    public let clientID: String?

    public init(
        bucket: String, key: String, entityID: Int64, nodeID: Int64? = nil, kind: Kind, version: Int? = nil,
        clientID: String? = nil
    ) {
        self.bucket = bucket
        self.key = key
        self.entityID = entityID
        self.nodeID = nodeID ?? entityID
        self.kind = kind
        self.version = version
        self.clientID = clientID
    }
}

/// The local index answered to a server `index` request.
public struct IndexSnapshot: Hashable, Sendable {
    public struct Item: Hashable, Sendable {
        public let key: String
        public let version: Int
    }
    public struct Pending: Hashable, Sendable {
        public let key: String
        public let sourceVersion: Int?
        public let ccid: String
    }
    public let cv: String?
    public let index: [Item]
    public let pending: [Pending]
}

/// Counts for `bucketfs status`.
public struct StoreStats: Hashable, Sendable {
    public var buckets = 0
    public var entities = 0
    public var localFiles = 0
    public var byState: [String: Int] = [:]
    public var queuedChanges = 0
    public var sentChanges = 0
    /// Local changes (an edit, a removal) held back until a reload brings the server's version.
    public var changesAwaitingReload = 0
    /// Saves of large notes whose bytes the store has and has not parsed yet (the mount does,
    /// in the background): owed to the server too, though no change of them is queued yet.
    public var savesParsedLater = 0
    public var rejectedChanges = 0
}
