import Dispatch
import Foundation
import JSONDiff
import Logging
import Synchronization
import SyncStore

/// The mount's backend over the SQLite `SyncStore`: a thin adapter. Saves, deletes and renames
/// are `.deferred` store writes (kept through a crash of this process; `sync()` makes them
/// survive a power loss); the changes they make ready are handed to `onOutgoing` (the sync
/// engine sends them, never before the writes they rest on are synced; it also finds them in
/// the store after a restart).
///
/// Once mounted (`prepareForMount`), a save or a removal of a file, and the rename of a local
/// file onto an entity (an editor's save), are one write(2) to the store's save journal
/// (`SaveJournal`), not a store transaction in the file system's request: the store takes the
/// journaled edits in the background, a burst of them in one transaction, and every other call
/// here first waits until it has them all, so nothing ever reads or changes the store around an
/// edit it does not have yet. A crash leaves the rest in the journal, which the next mount
/// applies first. `sync` fsyncs the journal, not the store, for the edits it holds: the journal
/// is emptied only once the store's own fsync covers what it held.
public final class SyncStoreBackend: MountBackend {
    public let store: SyncStore
    private let onOutgoing: @Sendable ([OutgoingChange]) -> Void
    private let onBucketCreated: @Sendable (String) -> Void
    private let onBucketRemoved: @Sendable (String) -> Void
    private let onOpenedForWriting: @Sendable (_ bucket: String, _ key: String) -> Void
    private let logger: Logger
    /// Removes chunks no file needs any more, off the file system's queues.
    private let reclaimer = DispatchQueue(label: "bucketfs-reclaim")
    private let reclaimScheduled = Mutex(false)
    /// Each bucket's file format, read once: it does not change while mounted.
    private let formats = Mutex<[String: any EntityFileFormat]>([:])
    /// The store's directory, worked out once: every write(2) to a file asks for it (where a
    /// working copy would spill), and NSString's path handling costs ~20K instructions a call.
    public let scratchDirectory: String
    /// Journaled edits the store does not have yet.
    private let journaled = Mutex(JournaledEdits())
    /// Held while edits move from the journal to the store: one batch at a time, in order.
    private let applying = NSLock()
    /// Where the store takes journaled edits when nothing else asked for them first (not
    /// private: a test suspends it, to see what the other paths do alone).
    let applier = DispatchQueue(label: "bucketfs-saves")
    /// The most edits one store transaction takes: a long one holds up the file system's other
    /// store work (renames, listings) and the sync engine, which wait for it.
    static let editsPerTransaction = 256
    /// The most saved bytes one store transaction takes (one larger save goes alone): a save is
    /// parsed, diffed and rendered in it, and every copy lives until it commits, so twelve 15 MiB
    /// notes saved at once took 4 GiB in one transaction (issue 37).
    static let savedBytesPerTransaction = 4 << 20
    /// The most saved bytes left waiting in memory for the store: a save that would go past it
    /// first has the store take those waiting (its saver applies them, as a reader does). A
    /// burst of big saves came faster than the store took them: twelve 14 MiB saves kept every
    /// one in memory at once, 200 MiB (issue 37). Never reached by bursts of ordinary notes.
    static let savedBytesWaitingAtMost = 16 << 20
    /// Saves of entity files this large or larger go into the store as their bytes alone, and
    /// are parsed, diffed and queued afterwards on `parser` (`SyncStore.finishDeferredParse`):
    /// the seconds a note of several MiB takes then hold up no other file's save (issue 37).
    public static let parsedLaterFrom = 1 << 20
    /// `parsedLaterFrom`, or another size the mount was given (the tests' small one, so that
    /// their small notes take this path too).
    private let parsingLaterFrom: Int
    /// Where saves left unparsed are parsed, oldest first.
    private let parser = DispatchQueue(label: "bucketfs-parse")
    /// The entities `parser` has still to look at (a key may be listed twice: the second look
    /// finds nothing left to parse, where a skipped one could miss a save made meanwhile).
    private let parsesWaiting = Mutex<[(bucket: String, key: String)]>([])

    /// How many of `edits` (oldest first, none after `last`) one transaction takes: at most
    /// `editsPerTransaction`, and `savedBytesPerTransaction` of saves unless the first alone is more.
    static func transactionLength(of edits: some Sequence<JournaledEdit>, upTo last: Int64 = .max) -> Int {
        var count = 0
        var bytes = 0
        for edit in edits {
            guard count < editsPerTransaction, edit.sequence <= last else { break }
            if case .save(let saved) = edit.edit {
                if count > 0 && bytes + saved.count > savedBytesPerTransaction { break }
                bytes += saved.count
            }
            count += 1
        }
        return count
    }

    struct JournaledEdits {
        /// Nil until `prepareForMount`: edits go straight to the store.
        var journal: SaveJournal?
        var waiting = WaitingEdits()
        var nextSequence: Int64 = 1
        /// When the background apply scheduled last will run (`DispatchTime` nanoseconds), nil
        /// once it began: an edit journaled before then goes with it.
        var applyAt: UInt64?
        /// Counts the background applies scheduled: the one scheduled last runs; one it was
        /// brought forward from finds a later number and leaves the edits to it.
        var appliesScheduled: UInt64 = 0
        /// When the background apply last began (`DispatchTime` nanoseconds).
        var lastApply: UInt64 = 0
        /// The journal's records up to this sequence number are on disk (`sync`).
        var syncedThrough: Int64 = 0
        /// An fsync of the journal began since it was last emptied: its edits were promised to
        /// survive a power loss, so it is emptied only once the store's WAL is on disk too.
        var promised = false
        /// The store's `committedWrites` just after it took the last batch of edits.
        var appliedThroughCommit: UInt64 = 0
        /// Changes of files the store has but the journal does not hold (made outside it, or
        /// emptied from it before the WAL was on disk) go up to this commit: `sync` fsyncs
        /// the WAL through it.
        var storeWritesToSync: UInt64 = 0
        var settleScheduled = false

        /// Empties the journal, which holds no edit the store lacks (`waiting` is empty), none of
        /// them promised past what the store's `sync` covers. Kept when it cannot be emptied: the
        /// store skips what it has at the next mount.
        mutating func emptyJournal() {
            guard let journal, (try? journal.removeAll()) != nil else { return }
            promised = false
            syncedThrough = nextSequence - 1
        }
    }

    /// The journaled edits the store does not have yet, oldest first, with how many each file
    /// has: every answer from the server asks whether its keys have one waiting, and a burst of
    /// saves can leave thousands waiting.
    struct WaitingEdits {
        /// Nil once applied: an applied save's bytes go then, not when the array is next
        /// compacted (a burst of big saves that never left it empty kept every one, issue 37).
        private var edits: [JournaledEdit?] = []
        /// `edits` before this index are applied: dropping them one batch at a time from the
        /// front of the array would move the rest each time.
        private var start = 0
        private var countPerFile: [FileKey: Int] = [:]
        /// The bytes of the saves among them (`savedBytesWaitingAtMost`).
        private(set) var savedBytes = 0

        struct FileKey: Hashable {
            let bucket: String
            /// By its bytes: two spellings of one text are two entities.
            let key: JSONKey

            init(bucket: String, key: String) {
                self.bucket = bucket
                self.key = JSONKey(key)
            }
        }

        var isEmpty: Bool { start == edits.count }
        var last: JournaledEdit? { isEmpty ? nil : edits.last ?? nil }

        mutating func append(_ edit: JournaledEdit) {
            edits.append(edit)
            if case .save(let bytes) = edit.edit { savedBytes += bytes.count }
            for key in edit.entityKeys { countPerFile[FileKey(bucket: edit.bucket, key: key), default: 0] += 1 }
        }

        /// The oldest edits, none after sequence `last`, as many as one transaction takes.
        func oldestForOneTransaction(upTo last: Int64) -> [JournaledEdit] {
            // (Those from `start` on are all still there.)
            let length = SyncStoreBackend.transactionLength(of: edits[start...].lazy.compactMap { $0 }, upTo: last)
            return edits[start..<start + length].compactMap { $0 }
        }

        mutating func removeOldest(_ count: Int) {
            for index in start..<start + count {
                guard let edit = edits[index] else { continue }
                if case .save(let bytes) = edit.edit { savedBytes -= bytes.count }
                for key in edit.entityKeys {
                    let file = FileKey(bucket: edit.bucket, key: key)
                    if countPerFile[file] == 1 { countPerFile[file] = nil } else { countPerFile[file]! -= 1 }
                }
                edits[index] = nil
            }
            start += count
            if isEmpty {
                edits.removeAll(keepingCapacity: true)
                start = 0
            } else if start >= 4096 && start >= edits.count / 2 {
                edits.removeFirst(start)
                start = 0
            }
        }

        func hasEdit(bucket: String, ofAnyOf keys: Set<String>) -> Bool {
            keys.contains { countPerFile[FileKey(bucket: bucket, key: $0)] != nil }
        }
    }

    /// An adapter over `store`; `onOutgoing` receives changes ready to send after each local edit,
    /// `onBucketCreated` the name of a bucket made with mkdir (so the engine starts syncing it),
    /// `onBucketRemoved` the name of one removed with rmdir (so the engine stops),
    /// `onOpenedForWriting` the bucket and key of an entity opened for writing (it must not wait).
    /// `parsingLaterFrom`: the size from which saves are parsed after the store took them.
    public init(
        store: SyncStore, logger: Logger = Logger(label: "bucketfs.fuse"), parsingLaterFrom: Int = parsedLaterFrom,
        onBucketCreated: @escaping @Sendable (String) -> Void = { _ in },
        onBucketRemoved: @escaping @Sendable (String) -> Void = { _ in },
        onOpenedForWriting: @escaping @Sendable (_ bucket: String, _ key: String) -> Void = { _, _ in },
        onOutgoing: @escaping @Sendable ([OutgoingChange]) -> Void = { _ in }
    ) {
        self.store = store
        self.parsingLaterFrom = max(parsingLaterFrom, 1)
        scratchDirectory = (store.path as NSString).deletingLastPathComponent
        self.logger = logger
        self.onBucketCreated = onBucketCreated
        self.onBucketRemoved = onBucketRemoved
        self.onOpenedForWriting = onOpenedForWriting
        self.onOutgoing = onOutgoing
    }

    public func buckets() throws(FSError) -> [MountBucket] {
        try mapped { () throws(StoreError) in try store.buckets().map(Self.bucket) }
    }

    public func createBucket(named name: String) throws(FSError) -> MountBucket {
        // Bucket names on the wire: [A-Za-z0-9._%-]{1,64} (DESIGN.md, protocol facts); a
        // grouped bucket's (`BucketGroups`) group and leaf each.
        let parts = BucketGroups.parts(of: name)
        guard parts.allSatisfy({ (1...64).contains($0.utf8.count) && $0.utf8.allSatisfy(Self.isBucketNameByte) }) else {
            throw FSError.invalidArgument
        }
        let bucket = try mapped { () throws(StoreError) in Self.bucket(try store.ensureBucket(name)) }
        onBucketCreated(name)
        return bucket
    }

    public func removeBucket(named name: String) throws(FSError) {
        // Only an empty bucket goes: `.notEmpty` while it holds files, `.busy` while removals
        // wait for the server. The server keeps its data, and mkdir brings it back.
        try mapped { () throws(StoreError) in try store.removeBucket(named: name) }
        onBucketRemoved(name)
    }

    public func openedForWriting(bucket: String, name: MountItemName) {
        // A local-only file is never sent: nothing to reserve.
        if case .entity(let key) = name { onOpenedForWriting(bucket, key) }
    }

    public func forEachEntry(bucket: String, _ body: (MountEntry) -> Void) throws(FSError) {
        // `body` runs in the store's read transaction, where nothing may read the store again:
        // the format is known before, and an empty file of a text view (whose permissions need
        // the entity's value) comes after.
        let format = format(of: bucket)
        var emptyInTextView: [DirectoryEntry] = []
        try mapped { () throws(StoreError) in
            try store.forEachEntry(bucket: bucket) { stored in
                if format is TextFieldFormat, stored.size == 0, stored.mode == nil {
                    emptyInTextView.append(stored)
                } else {
                    body(entry(bucket, stored, format: format))
                }
            }
        }
        for stored in emptyInTextView { body(entry(bucket, stored, format: format)) }
    }

    public func entry(bucket: String, name: MountItemName) throws(FSError) -> MountEntry? {
        try mapped { () throws(StoreError) in
            try store.lookup(bucket: bucket, name: Self.storeName(name)).map { entry(bucket, $0) }
        }
    }

    public func read(bucket: String, name: MountItemName) throws(FSError) -> [UInt8] {
        let bytes = try mapped { () throws(StoreError) -> [UInt8]? in
            switch name {
            case .entity(let key): return try store.readEntity(bucket: bucket, key: key)
            case .localFile(let fileName): return try store.localFile(bucket: bucket, name: fileName)?.content
            }
        }
        guard let bytes else { throw FSError.notFound }
        return bytes
    }

    public func content(bucket: String, name: MountItemName) throws(FSError) -> MountContent {
        guard case .localFile(let fileName) = name else { return .bytes(try read(bucket: bucket, name: name)) }
        let content = try mapped { () throws(StoreError) in try store.localFileContent(bucket: bucket, name: fileName) }
        switch content {
        case nil: throw FSError.notFound
        case .bytes(let bytes)?: return .bytes(bytes)
        case .chunked(let stored)?: return .stored(MountStoredContent(id: stored.id, size: stored.size))
        }
    }

    public var chunkSize: Int { SyncStore.localChunkSize }

    public func readChunk(of content: MountStoredContent, index: Int) throws(FSError) -> [UInt8] {
        try mapped { () throws(StoreError) in
            try store.readChunk(of: LocalContent(id: content.id, size: content.size), index: index)
        }
    }

    public func stage(
        size: Int, fill: (Int, UnsafeMutableRawBufferPointer) throws(FSError) -> Void
    ) throws(FSError) -> MountStoredContent {
        // The working copy's own error (a failed read of it) is the one to answer with.
        var fillError: FSError?
        do {
            let staged = try store.stageLocalContent(size: size) { offset, buffer in
                do throws(FSError) { try fill(offset, buffer) } catch {
                    fillError = error
                    throw error
                }
            }
            return MountStoredContent(id: staged.id, size: staged.size)
        } catch {
            if let fillError { throw fillError }
            throw mappedError(error)
        }
    }

    public func commitLocalFile(bucket: String, name: String, content: MountStoredContent, newID: UInt64?) throws(FSError) -> MountEntry {
        let stored = try changing { () throws(StoreError) in
            try store.commitLocalContent(
                bucket: bucket, name: name, content: LocalContent(id: content.id, size: content.size),
                newID: newID.map(Int64.init), durability: .deferred)
        }
        reclaimUnusedChunks()
        return entry(bucket, stored)
    }

    public func discard(_ content: MountStoredContent) {
        do {
            try store.discardLocalContent(LocalContent(id: content.id, size: content.size))
        } catch {
            // Reclaimed at the next mount (`prepareForMount`).
            logger.warning("staged content kept until the next mount: \(error)")
        }
        reclaimUnusedChunks()
    }

    public func resizeLocalFile(bucket: String, name: String, to size: Int) throws(FSError) -> MountEntry {
        let resized = try changing { () throws(StoreError) in
            try store.resizeLocalFile(bucket: bucket, name: name, to: size, durability: .deferred)
        }
        // A shrink hands the chunks past the end to the reclaimer rather than removing them.
        reclaimUnusedChunks()
        return entry(bucket, resized)
    }

    public func prepareForMount() throws(FSError) {
        FreedMemory.returnLargeBlocksWhenFreed()
        try mapped { () throws(StoreError) in
            try store.reclaimOrphanedChunks()
            try openJournal()
        }
    }

    /// Removes, in the background, chunks a save, rename or unlink left without a file.
    private func reclaimUnusedChunks() {
        guard store.hasUnusedChunks, reclaimScheduled.withLock({ scheduled in
            defer { scheduled = true }
            return !scheduled
        }) else { return }
        reclaimer.async { [self] in
            reclaimScheduled.withLock { $0 = false }
            do throws(StoreError) {
                try store.reclaimUnusedChunks()
            } catch .closed {
                // Unmounted meanwhile: the next mount reclaims them.
            } catch {
                logger.warning("unused chunks kept for now: \(error)")
            }
        }
    }

    public func save(bucket: String, name: MountItemName, bytes: [UInt8], newID: UInt64?) throws(FSError) -> MountSavedFile {
        if case .entity = name { FreedMemory.afterWork(on: bytes.count) }
        makeRoom(forSaving: bytes.count)
        if let time = try journal(.save(bytes), bucket: bucket, file: Self.storeName(name), newID: newID) {
            if case .localFile(let fileName) = name { warnIfNamedLikeAnEntity(fileName, in: bucket) }
            return MountSavedFile(size: bytes.count, mtime: time, ctime: time)
        }
        return try changing { () throws(StoreError) -> MountSavedFile in
            switch name {
            case .entity(let key):
                let result = try store.saveLocal(
                    bucket: bucket, key: key, bytes: bytes, nodeID: newID.map(Int64.init), durability: .deferred)
                if let change = result.readyToSend { onOutgoing([change]) }
                if let problem = result.parseError, !bytes.isEmpty { reportInvalid(bucket: bucket, key: key, problem) }
                return MountSavedFile(size: result.entity.content.count, mtime: result.entity.mtime, ctime: result.entity.ctime)
            case .localFile(let fileName):
                let file = try store.writeLocalFile(
                    bucket: bucket, name: fileName, bytes: bytes, newID: newID.map(Int64.init), durability: .deferred)
                warnIfNamedLikeAnEntity(fileName, in: bucket)
                reclaimUnusedChunks()
                return MountSavedFile(size: file.content.count, mtime: file.mtime, ctime: file.ctime)
            }
        }
    }

    private func warnIfNamedLikeAnEntity(_ fileName: String, in bucket: String) {
        let fileExtension = fileExtension(bucket: bucket)
        if let stem = FileNameCodec.localJSONStem(fileName, extension: fileExtension) {
            // `100%.json` looks like an entity, but its name is no key's (DESIGN.md): say so.
            logger.warning(
                "kept locally only: \(fileName) has a % that is no escape of a key; renamed \(FileNameCodec.plainFileName(for: stem, extension: fileExtension)) it syncs",
                metadata: ["bucket": "\(bucket)"])
        }
    }

    // MARK: - Journaled edits

    /// Appends the edit to the journal and has the store take it soon; returns its time, or nil
    /// before the mount (no journal yet).
    private func journal(_ edit: JournaledEdit.Edit, bucket: String, file: EntryName, newID: UInt64?) throws(FSError) -> MountTime? {
        let time = SyncStore.now()
        let now = DispatchTime.now()
        let scheduling = try journaled.withLock { edits throws(FSError) -> Scheduling in
            guard let journal = edits.journal else { return .notMounted }
            let entry = JournaledEdit(
                sequence: edits.nextSequence, bucket: bucket, file: file, edit: edit, nodeID: newID.map(Int64.init), time: time)
            do throws(StoreError) { try journal.append(entry) } catch { throw mappedError(error) }
            edits.nextSequence += 1
            edits.waiting.append(entry)
            // A scratch file's save waits for the rename that makes it an entity's save (an
            // editor's save), to go in with it as one entity save; anything else comes soon.
            let scratchSave = if case .save = edit, case .localFile = file { true } else { false }
            let start = max(
                edits.lastApply + Self.applyWindow, now.uptimeNanoseconds + (scratchSave ? Self.scratchFileWait : 0))
            if let scheduled = edits.applyAt, scheduled <= start { return .withTheEditsBefore }
            edits.applyAt = start
            edits.appliesScheduled += 1
            return .applying(at: DispatchTime(uptimeNanoseconds: start), number: edits.appliesScheduled)
        }
        switch scheduling {
        case .notMounted: return nil
        case .withTheEditsBefore: return time
        case .applying(let start, let number):
            applier.asyncAfter(deadline: start) { [self] in applyInBackground(scheduled: number) }
            return time
        }
    }

    /// The bytes of the journaled saves the store does not have yet.
    var savedBytesWaiting: Int { journaled.withLock { $0.waiting.savedBytes } }

    /// Has the store take the saves waiting for it first, when `bytes` more would keep more than
    /// `savedBytesWaitingAtMost` of them in memory. A failure is the background applier's to retry.
    public func makeRoom(forSaving bytes: Int) {
        let waiting = savedBytesWaiting
        guard waiting > 0, waiting + bytes > Self.savedBytesWaitingAtMost else { return }
        try? applyJournaledEdits()
    }

    /// When the store takes a journaled edit.
    private enum Scheduling {
        /// Never: there is no journal yet, the edit goes straight to the store.
        case notMounted
        /// With the edits journaled before it, whose apply is scheduled already.
        case withTheEditsBefore
        case applying(at: DispatchTime, number: UInt64)
    }

    /// A burst of edits goes to the store one transaction per this many nanoseconds at most (an
    /// editor's save, its scratch file and its rename, in one; a checkout's files in a few), the
    /// first edit after a quiet spell at once. A reader never waits for it: it applies them itself.
    static let applyWindow: UInt64 = 2_000_000

    /// How long the save of a local file waits for more edits before the store takes it: an
    /// editor's scratch file is renamed over the note it saves within microseconds, and the
    /// two then cost the store one entity save (`SyncStore.applyEditorsSave`) instead of a
    /// local file written, then moved and parsed in a second transaction. Nothing waits on
    /// it: the journal holds the bytes (fsynced when asked), readers take them from the mount,
    /// and a local file is not sent.
    static let scratchFileWait: UInt64 = 100_000_000

    /// Returns once the store has every edit made so far: for readers of the store that do not
    /// go through this backend.
    public func waitForJournaledEdits() throws(FSError) {
        try mapped {}
    }

    /// `scheduled`: the number of the scheduled apply (`appliesScheduled`), nil for a retry.
    private func applyInBackground(scheduled: UInt64? = nil) {
        CPUPlacement.placeAgainIfStrayed()
        let superseded = journaled.withLock { edits -> Bool in
            // Scheduled for a scratch file and brought forward since by a later edit: the
            // apply scheduled then takes (or took) the edits.
            if let scheduled, edits.applyAt != nil, scheduled != edits.appliesScheduled { return true }
            edits.applyAt = nil
            edits.lastApply = DispatchTime.now().uptimeNanoseconds
            return false
        }
        guard !superseded else { return }
        do throws(StoreError) {
            try applyJournaledEdits()
        } catch .closed {
            // Unmounted: the journal keeps them for the next mount.
        } catch {
            logger.error("edits kept in the journal for now: \(error); trying again in a second")
            applier.asyncAfter(deadline: .now() + 1) { [self] in applyInBackground() }
        }
    }

    /// Moves every edit journaled so far into the store; returns once the store has them. Edits
    /// journaled meanwhile are not waited for: a burst of saves going on cannot hold up a reader
    /// (or the sync engine, which applies remote data after them) for longer than its own past.
    private func applyJournaledEdits() throws(StoreError) {
        guard let last = journaled.withLock({ $0.waiting.last?.sequence }) else { return }
        while true {
            // One transaction at a time: callers take turns, in the journal's order.
            applying.lock()
            defer { applying.unlock() }
            let batch = journaled.withLock { $0.waiting.oldestForOneTransaction(upTo: last) }
            guard !batch.isEmpty else { return }
            let outcome = try store.applyJournaledEdits(batch, parsingLaterFrom: parsingLaterFrom)
            let appliedThrough = store.committedWrites
            let settling = journaled.withLock { edits -> Bool in
                edits.waiting.removeOldest(batch.count)
                edits.appliedThroughCommit = appliedThrough
                guard edits.waiting.isEmpty else { return false }
                guard edits.promised else {
                    // Nothing in it was promised past a crash of this process, which the store's
                    // own deferred writes survive; the next `sync` fsyncs them.
                    edits.storeWritesToSync = max(edits.storeWritesToSync, appliedThrough)
                    edits.emptyJournal()
                    return false
                }
                defer { edits.settleScheduled = true }
                return !edits.settleScheduled
            }
            if settling { applier.asyncAfter(deadline: .now() + Self.settleDelay) { [self] in settleJournal() } }
            report(outcome)
        }
    }

    /// How long a journal whose edits the store has waits to be emptied: the sync engine's own
    /// fsyncs of the WAL (before it sends) usually cover them by then, so emptying it costs none.
    static let settleDelay: DispatchTimeInterval = .milliseconds(200)

    /// Empties a journal that was fsynced, once the store's WAL holds its edits on disk (and
    /// nothing was journaled meanwhile: the next batch tries again).
    private func settleJournal() {
        applying.lock()
        defer { applying.unlock() }
        let target = journaled.withLock { edits -> UInt64? in
            edits.settleScheduled = false
            guard edits.waiting.isEmpty, edits.promised else { return nil }
            return edits.appliedThroughCommit
        }
        guard let target else { return }
        do throws(StoreError) {
            try emptyJournal(onceTheStoreHolds: target)
        } catch .closed {
            return
        } catch {
            // Kept, and still replayed correctly at the next mount; a later batch tries again.
            logger.warning("the save journal is kept for now: \(error)")
        }
    }

    /// With `applying` held, so that no batch is applied between the two: fsyncs the store's
    /// first `commit` writes, then empties the journal unless an edit came meanwhile.
    private func emptyJournal(onceTheStoreHolds commit: UInt64) throws(StoreError) {
        try store.syncDeferredWrites(through: commit)
        journaled.withLock { edits in
            if edits.waiting.isEmpty { edits.emptyJournal() }
        }
    }

    private func report(_ outcome: AppliedEdits) {
        let ready = outcome.applied.flatMap(\.readyToSend)
        if !ready.isEmpty { onOutgoing(ready) }
        parseLater(outcome.parsedLater)
        for applied in outcome.applied {
            if let problem = applied.parseError, case .save(let bytes) = applied.edit.edit, !bytes.isEmpty {
                reportInvalid(bucket: applied.edit.bucket, key: applied.edit.fileName, problem)
            }
        }
        // A local file's new bytes, removal or move may leave chunks no file needs.
        if outcome.applied.contains(where: { !$0.edit.file.isEntity }) { reclaimUnusedChunks() }
        for (edit, reason) in outcome.refused {
            let metadata: Logger.Metadata = ["bucket": "\(edit.bucket)", "file": "\(edit.fileName)"]
            switch (edit.edit, reason) {
            case (.remove, .unknownEntity), (.remove, .unknownLocalFile):
                // A file created in memory and removed before its first save, or one the server
                // removed meanwhile: nothing was there to remove.
                logger.debug("removal of a file the store does not have", metadata: metadata)
            default:
                logger.error("edit dropped: \(reason)", metadata: metadata)
            }
        }
    }

    /// Has `parser` parse the saves of `entities` the store took unparsed.
    private func parseLater(_ entities: [(bucket: String, key: String)]) {
        guard !entities.isEmpty else { return }
        let wasIdle = parsesWaiting.withLock { waiting in
            defer { waiting += entities }
            return waiting.isEmpty
        }
        if wasIdle { parser.async { [self] in finishParses() } }
    }

    private func finishParses() {
        while let next = parsesWaiting.withLock({ $0.first }) {
            do throws(StoreError) {
                if let finished = try store.finishDeferredParse(bucket: next.bucket, key: next.key) {
                    if let change = finished.readyToSend { onOutgoing([change]) }
                    if let problem = finished.parseError { reportInvalid(bucket: next.bucket, key: next.key, problem) }
                    FreedMemory.afterWork(on: finished.byteCount)
                }
            } catch .closed {
                // Unmounted: the store keeps the bytes unparsed, and the next mount parses them.
                parsesWaiting.withLock { $0.removeAll() }
                return
            } catch {
                logger.error("a large save is kept unparsed for now: \(error)", metadata: ["bucket": "\(next.bucket)", "key": "\(next.key)"])
            }
            parsesWaiting.withLock { _ = $0.removeFirst() }
        }
    }

    private func reportInvalid(bucket: String, key: String, _ problem: String) {
        // DESIGN.md: an invalid write is kept, not sent, and reported (xattr, log, status).
        logger.warning("saved locally only: \(problem)", metadata: ["bucket": "\(bucket)", "key": "\(key)"])
    }

    /// Opens the journal and applies what a crash left in it (once: a later mount of this
    /// backend finds it open, and its own saves applied at the unmount before).
    private func openJournal() throws(StoreError) {
        guard journaled.withLock({ $0.journal == nil }) else { return }
        let journal = try SaveJournal(path: SaveJournal.path(besideStore: store.path))
        let left = try journal.recorded()
        if !left.isEmpty {
            logger.info("applying \(left.count) edits the last mount left in its journal")
            var start = 0
            while start < left.count {
                let length = Self.transactionLength(of: left[start...])
                report(try store.applyJournaledEdits(Array(left[start..<start + length]), parsingLaterFrom: parsingLaterFrom))
                start += length
            }
            // The journal may have been fsynced: its edits leave it only once the WAL is on disk.
            try store.syncDeferredWrites()
            try journal.removeAll()
        }
        // Saves a mount stopped before it parsed (the journal's among them).
        parseLater(try store.entitiesParsedLater())
        let next = max(try store.appliedJournalSequence(), left.last?.sequence ?? 0) + 1
        journaled.withLock { edits in
            edits.journal = journal
            edits.nextSequence = next
            edits.syncedThrough = next - 1
        }
        store.applyLocalEditsFirst { [weak self] bucket, keys in
            guard let self,
                journaled.withLock({ $0.waiting.hasEdit(bucket: bucket, ofAnyOf: keys) })
            else { return }
            do throws(StoreError) { try applyJournaledEdits() } catch {
                // Still in the journal: applied after this remote data, or at the next mount.
                logger.warning("edits kept in the journal while remote data is applied: \(error)")
            }
        }
    }

    public func reserveIDs(count: Int) throws(FSError) -> ClosedRange<UInt64> {
        // Changing: a journaled save that uses one of the ids must never outlive the reservation.
        try changing { () throws(StoreError) in
            let ids = try store.reserveNodeIDs(count: count)
            return UInt64(ids.lowerBound)...UInt64(ids.upperBound)
        }
    }

    public func delete(bucket: String, name: MountItemName) throws(FSError) {
        if try journal(.remove, bucket: bucket, file: Self.storeName(name), newID: nil) != nil { return }
        try changing { () throws(StoreError) in
            switch name {
            case .entity(let key):
                if let change = try store.deleteLocal(bucket: bucket, key: key, durability: .deferred) { onOutgoing([change]) }
            case .localFile(let fileName):
                try store.removeLocalFile(bucket: bucket, name: fileName, durability: .deferred)
                reclaimUnusedChunks()
            }
        }
    }

    public func rename(bucket: String, from source: MountItemName, to destination: MountItemName) throws(FSError) -> MountEntry {
        try changing { () throws(StoreError) -> MountEntry in
            let renamed = try store.rename(
                bucket: bucket, from: Self.storeName(source), to: Self.storeName(destination), durability: .deferred)
            if !renamed.changes.isEmpty { onOutgoing(renamed.changes) }
            if destination.isLocalFile { reclaimUnusedChunks() }
            // rsync -a sets the time on its temporary file, then renames it over the target.
            return entry(bucket, renamed.destination)
        }
    }

    /// The editor's save (a scratch file renamed over an entity's file) is journaled: the
    /// destination is the source's number, size, modification time and attributes, which the
    /// caller knows, under the new name. Other renames go through the store.
    public func rename(bucket: String, from source: MountEntry, to destination: MountItemName) throws(FSError) -> MountEntry {
        // Whether a text view can show an empty entity (0444 or 0644) is the store's to say.
        let viewDecides = source.permissions == nil && source.size == 0 && format(of: bucket) is TextFieldFormat
        if case .localFile(let name) = source.name, case .entity = destination, source.size <= SyncStore.entityFileLimit,
            !viewDecides,
            let time = try journal(.rename(to: Self.storeName(destination)), bucket: bucket, file: .localFile(name: name), newID: nil)
        {
            return MountEntry(
                id: source.id, bucket: bucket, name: destination, size: source.size, mtime: source.mtime, ctime: time,
                permissions: source.permissions ?? readOnlyPermissions(bucket, destination, size: source.size), atime: source.atime)
        }
        return try rename(bucket: bucket, from: source.name, to: destination)
    }

    public func setModificationTime(bucket: String, name: MountItemName, to time: MountTime) throws(FSError) -> MountEntry {
        // Stored, so touch/rsync -a times survive remounts (backup tools compare them).
        try changing { () throws(StoreError) in
            entry(bucket, try store.setModificationTime(bucket: bucket, name: Self.storeName(name), mtime: time, durability: .deferred))
        }
    }

    public func setAttributes(bucket: String, name: MountItemName, permissions: Int?, atime: MountTime?) throws(FSError) -> MountEntry {
        try changing { () throws(StoreError) in
            entry(bucket, try store.setAttributes(
                bucket: bucket, name: Self.storeName(name), mode: permissions.map(Int64.init), atime: atime, durability: .deferred))
        }
    }

    /// Fsyncs the journal for the edits it holds (the store takes them meanwhile), and the
    /// store's WAL only for changes the journal does not hold.
    public func sync() throws(FSError) {
        // The journal to fsync and its last edit; nil before the mount (every edit went to the store).
        let plan = journaled.withLock { edits -> (journal: SaveJournal?, through: Int64)? in
            guard let journal = edits.journal else { return nil }
            let last = edits.nextSequence - 1
            guard last > edits.syncedThrough else { return (nil, last) }
            // Before the fsync: the journal must not be emptied around it (`settleJournal`).
            edits.promised = true
            return (journal, last)
        }
        guard let plan else { return try mapped { () throws(StoreError) in try store.syncDeferredWrites() } }
        do throws(StoreError) {
            if let journal = plan.journal {
                try journal.sync()
                journaled.withLock { $0.syncedThrough = max($0.syncedThrough, plan.through) }
            }
            // Read after the journal's fsync: an edit emptied from it unsynced before then is in here.
            try store.syncDeferredWrites(through: journaled.withLock { $0.storeWritesToSync })
        } catch {
            throw mappedError(error)
        }
    }

    /// Whether a change made so far would not survive a power loss: a journaled edit not
    /// fsynced yet, or one the store holds outside the journal that its WAL has not on disk.
    public var hasUnsyncedChanges: Bool {
        let (journalBehind, storeWrites) = journaled.withLock { edits in
            (edits.journal != nil && edits.nextSequence - 1 > edits.syncedThrough, edits.storeWritesToSync)
        }
        return journalBehind || store.hasUnsyncedWrites(through: storeWrites)
    }

    /// Applies every journaled edit, fsyncs the store and empties the journal (unmount).
    public func settle() throws(FSError) {
        try mapped { () throws(StoreError) in
            applying.lock()
            defer { applying.unlock() }
            try emptyJournal(onceTheStoreHolds: store.committedWrites)
        }
    }

    public func status(bucket: String, key: String) throws(FSError) -> MountEntityStatus? {
        try mapped { () throws(StoreError) -> MountEntityStatus? in
            guard let (version, state) = try store.syncState(bucket: bucket, key: key) else { return nil }
            if state == .synced || state == .pending, let view = format(of: bucket) as? TextFieldFormat,
                let value = try store.entity(bucket: bucket, key: key)?.value, let reason = view.readOnlyReason(value)
            {
                // An empty file because the field is no text: say so, rather than look empty.
                return MountEntityStatus(key: key, version: version, state: "readonly:\(reason)")
            }
            return MountEntityStatus(key: key, version: version, state: state.description)
        }
    }

    public func fileExtension(bucket: String) -> String {
        format(of: bucket).fileExtension
    }

    private func format(of bucket: String) -> any EntityFileFormat {
        if let known = formats.withLock({ $0[bucket] }) { return known }
        // An unknown bucket (just made with mkdir, not stored yet) shows JSON until it is stored.
        guard let format = try? store.fileFormat(ofBucket: bucket) else { return JSONFileFormat() }
        formats.withLock { $0[bucket] = format }
        return format
    }

    public func remoteChanges() -> AsyncStream<[MountChange]> {
        // Unfolding runs in the consumer's task (no task of its own on the shared pool).
        let source = EventSource(store.remoteEventBatches())
        return AsyncStream(unfolding: { await source.next() }, onCancel: nil)
    }

    /// `format`: the bucket's, if the caller has it.
    private func entry(_ bucket: String, _ entry: DirectoryEntry, format: (any EntityFileFormat)? = nil) -> MountEntry {
        let id = UInt64(entry.id)
        let name: MountItemName
        switch entry.name {
        case .entity(let key): name = .entity(key: key)
        case .localFile(let fileName): name = .localFile(name: fileName)
        }
        return MountEntry(
            id: id, bucket: bucket, name: name, size: entry.size, mtime: entry.mtime, ctime: entry.ctime,
            permissions: entry.mode.map(Int.init) ?? readOnlyPermissions(bucket, name, size: entry.size, format: format),
            atime: entry.atime)
    }

    /// In a text view, 0444 for an entity it cannot show (its field is missing or no string), so
    /// editors say it is read-only, else 0644 (said outright: a node keeps permissions it was
    /// given). Such a file is empty: only empty files are looked at. A read-only bytes view (the
    /// messages an Apptimist mount received) is 0444 throughout, and so are its read-only keys.
    private func readOnlyPermissions(_ bucket: String, _ name: MountItemName, size: Int, format: (any EntityFileFormat)? = nil) -> Int? {
        let format = format ?? self.format(of: bucket)
        if case .entity(let key) = name, let bytes = format as? BytesFieldFormat {
            return bytes.isReadOnly(key: key) ? 0o444 : 0o644
        }
        guard case .entity(let key) = name, let view = format as? TextFieldFormat else { return nil }
        guard size == 0, let value = (try? store.entity(bucket: bucket, key: key))??.value, view.readOnlyReason(value) != nil
        else { return 0o644 }
        return 0o444
    }

    private static func bucket(_ info: BucketInfo) -> MountBucket {
        MountBucket(id: UInt64(info.id), name: info.name, ctime: info.ctime)
    }

    private static func storeName(_ name: MountItemName) -> EntryName {
        switch name {
        case .entity(let key): return .entity(key: key)
        case .localFile(let fileName): return .localFile(name: fileName)
        }
    }

    private static func isBucketNameByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "%"),
            UInt8(ascii: "-"):
            return true
        default:
            return false
        }
    }

    /// `mapped`, for a change of a file made in the store itself: the next `sync` fsyncs it.
    private func changing<T>(_ body: () throws(StoreError) -> T) throws(FSError) -> T {
        let result = try mapped(body)
        let through = store.committedWrites
        journaled.withLock { $0.storeWritesToSync = max($0.storeWritesToSync, through) }
        return result
    }

    /// The one place store errors become file-system errors; `body` runs once the store has
    /// every journaled edit.
    private func mapped<T>(_ body: () throws(StoreError) -> T) throws(FSError) -> T {
        do {
            try applyJournaledEdits()
            return try body()
        } catch {
            throw mappedError(error)
        }
    }

    private func mappedError(_ error: StoreError) -> FSError {
        switch error {
        case .unknownBucket, .unknownEntity, .unknownLocalFile: return .notFound
        case .bucketNotEmpty: return .notEmpty
        case .bucketAwaitsRemovals: return .busy
        case .diskFull:
            logger.error("\(error)")
            return .noSpace
        case .tooLarge:
            logger.warning("\(error)")
            return .fileTooLarge
        default: return .io(error.description)
        }
    }
}

/// The store's event iterator, pulled from one consumer task at a time.
private final class EventSource: @unchecked Sendable {
    private var iterator: AsyncStream<[RemoteEvent]>.Iterator

    init(_ events: AsyncStream<[RemoteEvent]>) {
        iterator = events.makeAsyncIterator()
    }

    func next() async -> [MountChange]? {
        guard let events = await iterator.next() else { return nil }
        return events.map { event in
            let kind: MountChange.Kind
            switch event.kind {
            case .created: kind = .created
            case .changed: kind = .changed
            case .removed: kind = .removed
            }
            return MountChange(bucket: event.bucket, key: event.key, id: UInt64(event.nodeID), kind: kind)
        }
    }
}
