import Glibc

/// Bytes of a file that is open: the working copy all handles of the inode share. In memory
/// (`bytes`), or once it grows large in a temporary file (`spill`), or, for one opened and not
/// changed, read from the store's chunks (`stored`); at most one of `spill` and `stored` is set.
struct OpenFile: Sendable {
    var bytes: [UInt8] = []
    /// The working copy once written or truncated past `BucketFileSystem.spillThreshold` (`bytes`
    /// empty): a local file's, and an entity file's too, whose bytes in memory would grow by
    /// doubling and stay while the store takes its save (issue 37).
    var spill: SpillFile?
    /// `spill.size`, as the state shows it (updated with it, inside its lock).
    var spillSize = 0
    /// A large file opened clean: reads by range from the store; copied to `spill` when changed.
    var stored: StoredContentReader?
    /// False until the bytes came from the store (or were truncated away); also after a remote
    /// change to a clean file, so the next read shows the new content.
    var loaded = false
    /// Written since the last save; saved on flush, fsync or release, never per write.
    var dirty = false
    /// Bumped on every change, so a save only clears `dirty` if nothing changed meanwhile.
    var generation: UInt64 = 0
    var handles = 0
    /// A utimens while dirty: applied after the save so the save does not overwrite it.
    var pendingModificationTime: MountTime?
    /// False when the bytes were read from the store while a remote change may have landed
    /// (they could be older than the store's): they are not kept in the closed-file cache.
    var cacheable = true
    /// The generation a save of a spilled copy last committed: an older one that finishes later
    /// is not committed over it.
    var committedGeneration: UInt64 = 0

    /// The working copy's length, wherever it is.
    var size: Int { spill != nil ? spillSize : stored?.content.size ?? bytes.count }

    /// The bytes reads are served from, when they are in memory (not a large file's, on disk).
    var servedBytes: [UInt8]? { loaded && spill == nil && stored == nil ? bytes : nil }

    /// Whether the bytes are the store's and small: the closed-file cache may keep them.
    var cacheableBytes: Bool { loaded && cacheable && spill == nil && stored == nil }

    /// Takes bytes read from the store, unless a working copy is there already. `fresh`: no
    /// remote change landed while they were read (they may go to the closed-file cache later).
    mutating func load(_ bytes: [UInt8], fresh: Bool) {
        load(.bytes(bytes), fresh: fresh)
    }

    /// `load`, for content that may be a large file's chunks (read by range, not loaded).
    mutating func load(_ content: MountContent, fresh: Bool) {
        guard !loaded else { return }
        switch content {
        case .bytes(let bytes): self.bytes = bytes
        case .stored(let stored): self.stored = StoredContentReader(stored)
        }
        loaded = true
        cacheable = fresh
    }

    /// The working copy goes (a remote change replaced a clean one): the next use loads it again.
    mutating func unload() {
        loaded = false
        bytes = []
        spill = nil
        stored = nil
    }

    /// Moves the in-memory bytes to a temporary file in `directory` (the copy grows large).
    mutating func spillBytes(into directory: String) throws(FSError) {
        let file = try SpillFile(directory: directory)
        try file.withLock { () throws(FSError) in try file.write(bytes, at: 0) }
        spill = file
        spillSize = bytes.count
        bytes = []
    }

    /// open(O_TRUNC): the working copy becomes empty, to be saved.
    mutating func truncate() {
        bytes = []
        spill = nil
        stored = nil
        loaded = true
        dirty = true
        generation += 1
    }

    /// pwrite(2) into the loaded working copy, zero-filling a gap; the caller has checked the
    /// size limit. Called in place (`openFiles[ino]?.write`), so the bytes are not copied; the
    /// copies are memcpy/memset, not element loops (a 128 KiB write took 22 ms in a debug build).
    mutating func write(_ data: UnsafeBufferPointer<UInt8>, at offset: Int) {
        if offset > bytes.count { appendZeros(offset - bytes.count) }
        let overlap = Swift.min(data.count, bytes.count - offset)
        if overlap > 0, let source = data.baseAddress {
            bytes.withUnsafeMutableBufferPointer { target in
                _ = memcpy(target.baseAddress! + offset, source, overlap)
            }
        }
        if overlap < data.count { bytes.append(contentsOf: UnsafeBufferPointer(rebasing: data[overlap...])) }
        dirty = true
        generation += 1
    }

    /// truncate(2) of the loaded working copy; the caller has checked the size limit.
    mutating func resize(to size: Int) {
        if size < bytes.count {
            bytes.removeSubrange(size...)
        } else if size > bytes.count {
            appendZeros(size - bytes.count)
        }
        dirty = true
        generation += 1
    }

    private mutating func appendZeros(_ count: Int) {
        let zeros = [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
            if let base = buffer.baseAddress { memset(base, 0, count) }
            initialized = count
        }
        bytes.append(contentsOf: zeros)
    }
}

/// The mount's size limit applied to one write: how many of `count` bytes at `offset` may be
/// written (a write that crosses the limit is short, as with RLIMIT_FSIZE), or EFBIG when none.
func writableCount(_ count: Int, at offset: Int, limit: Int) throws(FSError) -> Int {
    guard offset >= 0, count >= 0 else { throw FSError.invalidArgument }
    guard count > 0 else { return 0 }
    guard offset < limit else { throw FSError.fileTooLarge }
    return Swift.min(count, limit - offset)
}

/// Bytes a file served, told apart from other bytes by their length and a hash (`Hasher`,
/// seeded per process: it is compared within one mount's life only).
struct ContentIdentity: Hashable, Sendable {
    let count: Int
    let hash: Int

    /// Files up to this size are compared (hashing costs about a read of them); a larger one is
    /// mostly a scratch file kept on disk, which is read through its pages each time.
    static let largest = 1 << 20

    init?(_ bytes: [UInt8]) {
        guard bytes.count <= Self.largest else { return nil }
        var hasher = Hasher()
        bytes.withUnsafeBytes { hasher.combine(bytes: $0) }
        count = bytes.count
        hash = hasher.finalize()
    }
}

enum OpenHandle: Sendable {
    case file(ino: UInt64)
    /// A directory's listing taken at opendir (stable offsets for readdir): its inode numbers,
    /// `.` and `..` first; the names are the nodes' (`InodeTable.listedNode`).
    case directory(ino: UInt64, items: [UInt64])
}

/// Everything mutable in the file system, guarded by one lock (`BucketFileSystem.state`).
///
/// Lock order: this is the only lock the request handlers take. It is never held while calling
/// the backend, replying to the kernel, or notifying it (the notifier thread has its own queue
/// lock and never takes this one while holding that one).
struct FileSystemState: Sendable {
    var table: InodeTable
    var openFiles: [UInt64: OpenFile] = [:]
    var handles: [UInt64: OpenHandle] = [:]
    /// Bytes of closed clean files, so a re-open needs no store read.
    var closedFiles = ClosedFileCache()
    /// Bumped by every remote change; a store read that spans a bump may be stale.
    var remoteEpoch: UInt64 = 0
    var nextHandle: UInt64 = 1
    /// Symlinks are not stored; their numbers come from a range the store never reaches.
    var nextSymlinkInode: UInt64 = 1 << 62
    /// Numbers of the `.history` view's nodes, from the range below the symlinks'.
    var historyInodes = StableInodes<HistoryPath>(from: 1 << 61)
    /// Numbers of group directories (`BucketGroups`), from the range below the history view's.
    var groupInodes = StableInodes<String>(from: 1 << 60)
    /// Numbers the store set aside for files created in memory (`MountBackend.reserveIDs`).
    var reservedIDs: Range<UInt64> = 0..<0
    /// Entity files created in memory that have not reached the store yet (`makeFile`): their
    /// first save stores them under their number, and until then the store knows nothing of them.
    var unstoredEntities: Set<UInt64> = []
    /// Files created in memory with a mode other than the default (open's mode under the
    /// umask): the store takes it with their first save (`storeCreationMode`).
    var creationModes: [UInt64: mode_t] = [:]
    /// Directory times since the mount started: a create, unlink or rename inside a bucket sets
    /// both (as on any file system: `make` and backup tools read them), utimens sets mtime
    /// (rsync -a, cp -a). The store keeps no directory times, so they last for the mount's life.
    var directoryTimes: [UInt64: (mtime: MountTime, ctime: MountTime)] = [:]
    /// Each directory's listing as handles read it, shared by every handle opened while the
    /// directory's names stay the same (`InodeTable.listingVersion`): an opendir of a bucket of
    /// 1,000,000 files copies nothing, and readdir offsets mean the same in every such handle.
    private var listings: [UInt64: (version: UInt64, items: [UInt64])] = [:]
    /// The listing version each directory had when last opened: the kernel's cached listing
    /// (`FOPEN_CACHE_DIR`) was read from it, so it may be kept while the version stays.
    private var kernelListingVersions: [UInt64: UInt64] = [:]
    /// What each file served when it was last opened (`ContentIdentity`): the pages the kernel
    /// cached of it since came from those bytes, or from writes through it, or were dropped by
    /// an invalidation. Gone once the kernel forgets the inode (and its pages).
    private var kernelPages: [UInt64: ContentIdentity] = [:]

    init(rootTime: MountTime) {
        table = InodeTable(rootTime: rootTime)
    }

    /// Puts a file's working copy back. One that no handle holds and that owes the store nothing
    /// leaves, its bytes kept in the closed-file cache when they are the store's.
    mutating func putBack(_ open: OpenFile, of ino: UInt64) {
        if open.handles <= 0 && !open.dirty {
            openFiles.removeValue(forKey: ino)
            if open.cacheableBytes { closedFiles.insert(ino, bytes: open.bytes) }
        } else {
            openFiles[ino] = open
        }
    }

    /// Whether the kernel may keep the pages it cached of file `ino` for an open that serves
    /// `serving` (`FOPEN_KEEP_CACHE`): only when the file served the same bytes at its last open.
    /// Any other change to them (a remote change, a save the store merged or stamped, a write
    /// since) makes other bytes, and the kernel drops its pages as it did before. `serving` nil:
    /// bytes not worth comparing (large, read through, or not served from memory).
    mutating func keepsKernelPages(of ino: UInt64, serving: ContentIdentity?) -> Bool {
        let kept = serving != nil && kernelPages[ino] == serving
        kernelPages[ino] = serving
        return kept
    }

    /// After a FORGET: once the kernel holds `ino` no more, its pages went with it, and the
    /// bytes kept of it closed go too (the kernel forgets under memory pressure; a file opened
    /// again is looked up again first, and a read from the store serves it). Both records give
    /// back their room once mostly empty: after `grep -r` of 1,000,000 files and a forget of
    /// them all they held ~120 MB (issue 40).
    mutating func forgetFileRecords(of ino: UInt64) {
        guard !table.isReferenced(ino) else { return }
        kernelPages.removeValue(forKey: ino)
        kernelPages.giveBackRoomIfSparse()
        closedFiles.remove(ino)
    }

    /// The working copy of `ino` changed in memory (write, truncate, open(O_TRUNC)): the node
    /// shows its size, and now as mtime and ctime, until the save brings the store's.
    mutating func workingCopyChanged(_ ino: UInt64) {
        let now = Attributes.now()
        table.updateAttributes(of: ino, size: openFiles[ino]?.size ?? 0, mtime: now, ctime: now)
    }

    /// A name inside `directory` came or went: its mtime and ctime become now.
    mutating func touchDirectory(_ directory: UInt64) {
        let now = Attributes.now()
        directoryTimes[directory] = (now, now)
    }

    /// Bytes written to an entity's file after a removal from elsewhere took its name (the file
    /// was open when the removal came, and written after): the edit wins over the removal, as
    /// one written before it came does (`applyRemoteChange` keeps that one's name). The file
    /// takes its name again and its save makes the entity anew under its own number; if the
    /// note was made again since (elsewhere), the save goes to it, as a save of the name does.
    /// A file made here under the name meanwhile is another file, and keeps it. Returns what
    /// the kernel must forget (it may hold the name as missing).
    mutating func relinkRemovedElsewhere(_ ino: UInt64) -> [Invalidation] {
        guard let node = table.node(ino), !node.linked, node.removedElsewhere, case .file(let bucket, .entity(let key)) = node.kind,
            table.node(node.parent)?.linked == true
        else { return [] }
        if let occupant = table.child(of: node.parent, named: node.fileName) {
            if case .file(bucket, .entity(key)) = occupant.kind, !unstoredEntities.contains(occupant.ino) {
                table.alias(ino, to: occupant.ino)
            }
            return []
        }
        table.upsert(node)
        unstoredEntities.insert(ino)
        touchDirectory(node.parent)
        return [.entry(parent: node.parent, name: node.fileName), .inode(node.parent)]
    }

    mutating func takeReservedID() -> UInt64? {
        guard let id = reservedIDs.first else { return nil }
        reservedIDs = (id + 1)..<reservedIDs.upperBound
        return id
    }

    /// Opens `directory` for reading: a handle on its current listing, and whether the kernel may
    /// keep the listing it cached from the previous open (nothing came or went since).
    mutating func openDirectory(_ directory: Node) -> (handle: UInt64, keepKernelCache: Bool) {
        let version = table.listingVersion(of: directory.ino)
        if listings[directory.ino]?.version != version {
            let dots = [directory.ino, directory.parent]
            let previous = listings.removeValue(forKey: directory.ino)?.items.dropFirst(dots.count) ?? []
            let items = table.orderedListing(of: directory.ino, after: dots, previous: previous)
            listings[directory.ino] = (version, items)
        }
        let keep = kernelListingVersions.updateValue(version, forKey: directory.ino) == version
        let items = listings[directory.ino]?.items ?? []
        return (addHandle(.directory(ino: directory.ino, items: items)), keep)
    }

    /// Drops `directory`'s listing from memory (`InodeTable.unload`) when nothing open lies in
    /// it: no handle on it, no working copy of a file in it, no file made in memory and not
    /// stored yet. Returns how many nodes went; nil: it stays.
    mutating func unloadListing(of directory: UInt64) -> Int? {
        for case .directory(let ino, _) in handles.values where ino == directory { return nil }
        for ino in openFiles.keys where table.record(ino)?.parent == directory { return nil }
        for ino in unstoredEntities where table.record(ino)?.parent == directory { return nil }
        guard let dropped = table.unload(directory) else { return nil }
        listings.removeValue(forKey: directory)
        return dropped
    }

    mutating func addHandle(_ handle: OpenHandle) -> UInt64 {
        let number = nextHandle
        nextHandle += 1
        handles[number] = handle
        return number
    }

    /// The node's attributes as the kernel should see them (an open file's working size).
    func currentNode(_ ino: UInt64) -> Node? {
        table.node(ino).map(current)
    }

    /// `currentNode` for a number a directory's listing holds, while its name is still there
    /// (`InodeTable.listedNode`).
    func currentNode(listedIn directory: UInt64, _ ino: UInt64) -> Node? {
        table.listedNode(ino, in: directory).map(current)
    }

    private func current(_ node: Node) -> Node {
        var node = node
        if let open = openFiles[node.ino], open.loaded, open.dirty {
            node.size = open.size
        }
        if let times = directoryTimes[node.ino] {
            node.mtime = times.mtime
            node.ctime = times.ctime
        }
        return node
    }
}

/// Inode numbers of nodes the store gives none (nothing of them is stored: the `.history` view,
/// group directories), from a range it never reaches; a node keeps its number for the mount's
/// life, so a kernel's cached entry stays right.
struct StableInodes<Key: Hashable & Sendable>: Sendable {
    private var numbers: [Key: UInt64] = [:]
    private var next: UInt64

    init(from first: UInt64) { next = first }

    mutating func number(for key: Key) -> UInt64 {
        if let number = numbers[key] { return number }
        let number = next
        next += 1
        numbers[key] = number
        return number
    }
}
