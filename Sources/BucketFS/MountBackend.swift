/// Nanoseconds since the Unix epoch (the store's time unit).
public typealias MountTime = Int64

/// A name inside a bucket directory, as the store knows it: an entity key or a local-only file.
public enum MountItemName: Hashable, Sendable {
    /// `<encoded key>.json`: an entity that is synced.
    case entity(key: String)
    /// Any other name (editor scratch, non-JSON): kept locally, never sent.
    case localFile(name: String)

    public var isLocalFile: Bool {
        if case .localFile = self { return true }
        return false
    }
}

/// A bucket (a directory at the mount root).
public struct MountBucket: Hashable, Sendable {
    /// Stable, never reused, >= 2 and distinct from every entry id (it becomes the inode number).
    public let id: UInt64
    public let name: String
    public let ctime: MountTime

    public init(id: UInt64, name: String, ctime: MountTime) {
        self.id = id
        self.name = name
        self.ctime = ctime
    }
}

/// A file inside a bucket: its stable id, exact size and times.
public struct MountEntry: Hashable, Sendable {
    /// Stable, never reused, >= 2 and distinct across buckets, entities and local files.
    public let id: UInt64
    public let bucket: String
    public let name: MountItemName
    /// Exactly the number of bytes `read` returns.
    public let size: Int
    public let mtime: MountTime
    public let ctime: MountTime
    /// Permission bits set by chmod, and the access time set by `touch -a`; nil: the defaults.
    public let permissions: Int?
    public let atime: MountTime?

    public init(
        id: UInt64, bucket: String, name: MountItemName, size: Int, mtime: MountTime, ctime: MountTime,
        permissions: Int? = nil, atime: MountTime? = nil
    ) {
        self.id = id
        self.bucket = bucket
        self.name = name
        self.size = size
        self.mtime = mtime
        self.ctime = ctime
        self.permissions = permissions
        self.atime = atime
    }
}

/// A file's size and times after a save.
public struct MountSavedFile: Hashable, Sendable {
    public let size: Int
    public let mtime: MountTime
    public let ctime: MountTime

    public init(size: Int, mtime: MountTime, ctime: MountTime) {
        self.size = size
        self.mtime = mtime
        self.ctime = ctime
    }

    public init(_ entry: MountEntry) {
        self.init(size: entry.size, mtime: entry.mtime, ctime: entry.ctime)
    }
}

/// What the read-only xattrs of an entity show.
public struct MountEntityStatus: Hashable, Sendable {
    public let key: String
    /// The server version the client knows; nil before the entity reached the server.
    public let version: Int?
    /// `synced`, `pending`, `invalid`, `conflict` or `rejected:<code>`.
    public let state: String

    public init(key: String, version: Int?, state: String) {
        self.key = key
        self.version = version
        self.state = state
    }
}

/// A local file's bytes kept in chunks by the backend: read a chunk at a time, never whole.
public struct MountStoredContent: Hashable, Sendable {
    /// Names the chunks; a save gives the file new ones, so these never change.
    public let id: Int64
    public let size: Int

    public init(id: Int64, size: Int) {
        self.id = id
        self.size = size
    }
}

/// Where a file's bytes are.
public enum MountContent: Hashable, Sendable {
    case bytes([UInt8])
    case stored(MountStoredContent)
}

/// An entity that changed because of the server (after the store committed it).
public struct MountChange: Hashable, Sendable {
    public enum Kind: Hashable, Sendable {
        case created
        case changed
        case removed
    }
    public let bucket: String
    public let key: String
    public let id: UInt64
    public let kind: Kind

    public init(bucket: String, key: String, id: UInt64, kind: Kind) {
        self.bucket = bucket
        self.key = key
        self.id = id
        self.kind = kind
    }
}

/// Everything the file system needs from the local store; all of it is local (SQLite or memory).
///
/// Methods may block on the local disk but must never wait for the network: the file system
/// calls them through its work queues (on a FUSE thread when the queue is idle, never while
/// holding a lock) and replies to the kernel when they return.
///
/// Durability follows POSIX: a change is kept when its method returns, so a crash of this
/// process (kill -9) loses nothing; surviving a power loss as well is what `sync()` (fsync(2))
/// is for, as on any local file system.
public protocol MountBackend: Sendable {
    /// All buckets, by name.
    func buckets() throws(FSError) -> [MountBucket]
    /// Adds a bucket (mkdir at the root); returns the existing one if it is already there.
    func createBucket(named name: String) throws(FSError) -> MountBucket
    /// Removes an empty bucket directory; `.notEmpty` if it still holds files, `.busy` while it
    /// holds only removals the server has not confirmed.
    func removeBucket(named name: String) throws(FSError)
    /// The bucket's files, entities that have a file and local-only files, one at a time (a
    /// bucket may hold millions: the caller keeps what it needs of each).
    func forEachEntry(bucket: String, _ body: (MountEntry) -> Void) throws(FSError)
    /// One file, or nil if the name does not exist.
    func entry(bucket: String, name: MountItemName) throws(FSError) -> MountEntry?
    /// The exact bytes of the file (`.notFound` if it does not exist), all in memory: for entity
    /// files (bounded by their size limit); a local file, possibly gigabytes, is read with `content`.
    func read(bucket: String, name: MountItemName) throws(FSError) -> [UInt8]
    /// The file's bytes, or for a large local file where they are (`readChunk` reads them).
    func content(bucket: String, name: MountItemName) throws(FSError) -> MountContent
    /// Bytes per chunk of stored content.
    var chunkSize: Int { get }
    /// Chunk `index` of `content` (`chunkSize` bytes, fewer only at the end; empty past it).
    func readChunk(of content: MountStoredContent, index: Int) throws(FSError) -> [UInt8]
    /// Writes `size` bytes, got a chunk at a time from `fill(offset, buffer)`, as content no
    /// file shows yet, without holding the store for long: saves of other files go on
    /// meanwhile. `commitLocalFile` makes it a file's bytes, `discard` drops it.
    func stage(size: Int, fill: (Int, UnsafeMutableRawBufferPointer) throws(FSError) -> Void) throws(FSError) -> MountStoredContent
    /// Makes staged `content` the bytes of local file `name` (created with `newID` if needed),
    /// kept in the local store on return, as `save` does.
    func commitLocalFile(bucket: String, name: String, content: MountStoredContent, newID: UInt64?) throws(FSError) -> MountEntry
    /// Staged content that will not be committed.
    func discard(_ content: MountStoredContent)
    /// truncate(2) of a closed local file, without reading its bytes.
    func resizeLocalFile(bucket: String, name: String, to size: Int) throws(FSError) -> MountEntry
    /// A directory on the store's disk for the working copies of large open files.
    var scratchDirectory: String { get }
    /// At mount, before any save: drops what a crash left half-saved and applies the saves a
    /// crash left on their way to the store.
    func prepareForMount() throws(FSError)
    /// Replaces the file's bytes, creating it if needed; safe from a crash of this process on
    /// return (every later call of this backend sees the save). An entity whose bytes are not a
    /// JSON object is kept as written, state `invalid`, not sent. `newID`: the id a file created
    /// in memory (`reserveIDs`) is stored under at its first save; nil for a file the store holds
    /// already.
    func save(bucket: String, name: MountItemName, bytes: [UInt8], newID: UInt64?) throws(FSError) -> MountSavedFile
    /// Called before a large working copy of `byteCount` bytes is read into memory to be saved:
    /// a backend that holds saves in memory until its store has them lets go of those first,
    /// so the two are not held at once.
    func makeRoom(forSaving byteCount: Int)
    /// `count` ids that no stored file will ever get, for local files the file system creates
    /// in memory and stores at their first save (editors' scratch files are created, written
    /// and renamed at once: the store sees them once).
    func reserveIDs(count: Int) throws(FSError) -> ClosedRange<UInt64>
    /// Removes the file (an entity removal is sent; a local file just goes).
    func delete(bucket: String, name: MountItemName) throws(FSError)
    /// Moves `source`'s bytes (and modification time) to `destination` in one transaction,
    /// replacing it and removing `source`. An entity destination is a save of that entity; an
    /// entity source is a removal. Returns the destination.
    func rename(bucket: String, from source: MountItemName, to destination: MountItemName) throws(FSError) -> MountEntry
    /// `rename`, told what the caller knows of the source: its number, size, times and
    /// attributes, as the backend last returned them (and its bytes saved with `save`). A
    /// backend may then answer without looking the source up.
    func rename(bucket: String, from source: MountEntry, to destination: MountItemName) throws(FSError) -> MountEntry
    /// Sets the file's modification time (touch, rsync -a).
    func setModificationTime(bucket: String, name: MountItemName, to time: MountTime) throws(FSError) -> MountEntry
    /// Sets the file's permission bits and/or access time (nil: unchanged): kept with the file,
    /// never sent.
    func setAttributes(bucket: String, name: MountItemName, permissions: Int?, atime: MountTime?) throws(FSError) -> MountEntry
    /// Makes every change made so far survive a power loss (fsync, fsyncdir).
    func sync() throws(FSError)
    /// `sync`, and leaves nothing on its way to the local store (unmount): whatever reads the
    /// store next finds every change in it.
    func settle() throws(FSError)
    /// The entity's xattr data; nil for names that are not entities or do not exist.
    func status(bucket: String, key: String) throws(FSError) -> MountEntityStatus?
    /// Entities changed by the server, published after their transaction committed: one
    /// element per transaction (a first sync's index page is one).
    func remoteChanges() -> AsyncStream<[MountChange]>
    /// The file was opened for writing or created (before any byte is written): the backend hands
    /// that on to the sync engine (an Apptimist mount takes the file's LOCK) and returns at once,
    /// never waiting for it.
    func openedForWriting(bucket: String, name: MountItemName)
    /// What the bucket's entity files end in, without the dot (`json`, or `txt` for a text
    /// view); it does not change while mounted.
    func fileExtension(bucket: String) -> String
}

extension MountBackend {
    public func rename(bucket: String, from source: MountEntry, to destination: MountItemName) throws(FSError) -> MountEntry {
        try rename(bucket: bucket, from: source.name, to: destination)
    }
    public func settle() throws(FSError) { try sync() }
    public func fileExtension(bucket: String) -> String { "json" }
    public func openedForWriting(bucket: String, name: MountItemName) {}
    public func makeRoom(forSaving byteCount: Int) {}
}
