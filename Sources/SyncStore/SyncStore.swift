import Foundation
import GRDB
import JSONDiff
import Synchronization

/// The client's durable state for one mount: buckets, entities (ghost + local value + file
/// bytes), the outgoing change queue and local-only files, in one SQLite file (WAL).
///
/// Every public method is one transaction. A write that returned has its effect on disk even
/// if the process is killed or the machine loses power (its WAL frames are fsynced, as with
/// `synchronous=FULL`); those asked for `.deferred` durability (the mount's edits, remote data)
/// survive a kill of the process, and `syncDeferredWrites()` makes them survive a power loss too.
public final class SyncStore: Sendable {
    let pool: DatabasePool
    public let path: String
    private let subscribers = Mutex<[UUID: EventSubscriber]>([:])
    /// Which commits the disk already holds.
    private let syncProgress = Mutex(SyncProgress())
    /// Set by `close()`: a call that comes later (a background reclaim) fails instead of using
    /// a closed connection.
    private let closed = Mutex(false)
    /// Whether any local file may have chunks (made or found by this process): until then a
    /// save needs no look for chunks to reclaim.
    let mayHaveChunks = Mutex(false)
    /// Whether an entity may hold saved bytes not parsed yet (`EntityRow.unparsed`): until then
    /// what applies remote data needs no look for them.
    let mayHaveUnparsed = Mutex(false)
    /// The most bytes a change may take and still go in a message (`refuseChanges`).
    let changeSizeLimit = Mutex<Int?>(nil)
    /// For tests: runs in `finishDeferredParse` after its parse, before its transaction (where
    /// another save of the note may come in between).
    let afterDeferredParse = Mutex<TestHook?>(nil)
    struct TestHook: Sendable {
        let body: @Sendable () -> Void
    }
    /// What each change in flight brings its entity to, for applying its acknowledgement.
    let sentChanges = SentChanges()
    /// Runs before what a server sent is applied (`applyRemote`, `applyEntity`,
    /// `applyIndexPage`), with the bucket and keys it touches: the mount's edits of those keys
    /// still in its save journal go in first.
    private let localEditsFirst = Mutex<LocalEditsFirst?>(nil)

    /// The hook in a struct: a closure that is itself a `Mutex`'s value is wrapped in two
    /// reabstraction thunks each time `withLock` hands it out (its `inout` is generic), and the
    /// wrapped one is stored back, so every remote batch made the next call two thunks deeper.
    private struct LocalEditsFirst: Sendable {
        let body: @Sendable (_ bucket: String, _ keys: Set<String>) -> Void
    }

    struct SyncProgress {
        /// Commits that wrote something, counted on the writer (none fsyncs inside its commit).
        var commits: UInt64 = 0
        /// The count up to which they are on disk (a WAL fsync since).
        var syncedThrough: UInt64 = 0
    }

    /// Opens (creating and migrating if needed) the store at `path`.
    public init(path: String) throws(StoreError) {
        var configuration = Configuration()
        configuration.label = "SyncStore"
        configuration.busyMode = .timeout(10)
        configuration.prepareDatabase { db in
            // WAL + NORMAL: commits do not fsync; a `.synced` write fsyncs the WAL once it has
            // committed (`write`), which is what FULL would do inside the commit, so one
            // connection serves both durabilities without switching modes per transaction.
            try db.execute(sql: "PRAGMA synchronous = NORMAL")
            // A large file's save passes through the WAL; past a checkpoint the WAL file is cut
            // back to this size instead of keeping a gigabyte of disk.
            try db.execute(sql: "PRAGMA journal_size_limit = \(64 << 20)")
            // Debian's SQLite zeroes every freed page (SQLITE_SECURE_DELETE): removing a GiB
            // file's chunks wrote a GiB of zeros through the WAL, and every save waited behind
            // it. FAST zeroes what stays in b-tree pages and frees overflow pages as they are,
            // as a local disk leaves a removed file's blocks.
            try db.execute(sql: "PRAGMA secure_delete = FAST")
        }
        do {
            pool = try DatabasePool(path: path, configuration: configuration)
            try Schema.migrator.migrate(pool)
            let unparsed = try pool.read { db in try Bool.fetchOne(db, sql: "SELECT EXISTS (SELECT 1 FROM entity WHERE unparsed != 0)") }
            mayHaveUnparsed.withLock { $0 = unparsed ?? false }
        } catch {
            throw StoreError(error)
        }
        self.path = path
    }

    deinit {
        for subscriber in subscribers.withLock({ $0.values }) { subscriber.finish() }
    }

    /// Closes the database; further calls fail.
    public func close() throws(StoreError) {
        for subscriber in subscribers.withLock({ $0.values }) { subscriber.finish() }
        closed.withLock { $0 = true }
        do { try pool.close() } catch { throw StoreError(error) }
    }

    /// Events a subscriber has not taken yet, at most: a consumer that falls behind (a first
    /// sync publishes 1,000 to a transaction) loses the newest rather than holding memory that
    /// grows with the bucket.
    public static let eventBufferLimit = 10_000

    /// Entities changed by the server, published after their transaction committed.
    public func remoteEvents() -> AsyncStream<RemoteEvent> {
        let (stream, continuation) = AsyncStream<RemoteEvent>.makeStream(bufferingPolicy: .bufferingNewest(Self.eventBufferLimit))
        let id = subscribe(.each(continuation))
        continuation.onTermination = { [weak self] _ in self?.unsubscribe(id) }
        return stream
    }

    /// The same events, one element per committed transaction: a first sync's index page of
    /// 1,000 entities is one element, so a consumer does its per-element work (a thread hop, a
    /// write to a file) once per page rather than once per entity. The buffer is bounded by
    /// events, as the one-by-one stream's is (`eventBufferLimit`); a batch that would pass it is
    /// dropped whole.
    public func remoteEventBatches() -> AsyncStream<[RemoteEvent]> {
        let (stream, continuation) = AsyncStream<[RemoteEvent]>.makeStream(bufferingPolicy: .unbounded)
        let batches = BatchSubscription(continuation: continuation, limit: Self.eventBufferLimit)
        let id = subscribe(.batches(batches))
        continuation.onTermination = { [weak self] _ in self?.unsubscribe(id) }
        let taker = BatchTaker(stream.makeAsyncIterator(), subscription: batches)
        return AsyncStream(unfolding: { await taker.next() }, onCancel: nil)
    }

    private func subscribe(_ subscriber: EventSubscriber) -> UUID {
        let id = UUID()
        subscribers.withLock { $0[id] = subscriber }
        return id
    }

    private func unsubscribe(_ id: UUID) {
        _ = subscribers.withLock { $0.removeValue(forKey: id) }
    }

    func publish(_ events: [RemoteEvent]) {
        guard !events.isEmpty else { return }
        for subscriber in subscribers.withLock({ Array($0.values) }) {
            switch subscriber {
            case .each(let continuation): for event in events { continuation.yield(event) }
            case .batches(let subscription): subscription.offer(events)
            }
        }
    }

    /// Has `body` run before each application of what a server sent, with the bucket and the
    /// keys it touches. The mount's backend hands over the edits of those keys it journaled
    /// (`SaveJournal`) and the store does not have yet: a remote change then merges with a save
    /// made before it arrived, as it does with one the store already holds, instead of that save,
    /// applied after it, undoing it. Only those keys: the acknowledgements of a burst of saves
    /// must not wait for the rest of the burst.
    public func applyLocalEditsFirst(_ body: @escaping @Sendable (_ bucket: String, _ keys: Set<String>) -> Void) {
        localEditsFirst.withLock { $0 = LocalEditsFirst(body: body) }
    }

    /// Called first by every method that applies what a server sent.
    func takeLocalEditsFirst(bucket: String, keys: @autoclosure () -> Set<String>) {
        guard let hook = localEditsFirst.withLock({ $0 }) else { return }
        hook.body(bucket, keys())
    }

    /// How a write transaction reaches the disk.
    public enum Durability: Sendable {
        /// fsynced before returning: survives power loss (local saves, error records).
        case synced
        /// Handed to the OS before returning: survives a process crash (kill -9). A power loss
        /// may drop it and later deferred writes (never an earlier synced one: the WAL is
        /// ordered); the protocol recovers them (remote data is fetched again from the stored
        /// cv, an unrecorded ack makes a resend that the server answers with 409). Local edits
        /// made through the mount are deferred until fsync (`syncDeferredWrites`), as on a
        /// local disk; none goes on the wire before it is synced (`markSent`).
        case deferred
    }

    /// One write transaction; GRDB errors become `StoreError` (`diskFull` when the disk is full).
    func write<T>(_ durability: Durability = .synced, _ body: (Database) throws -> T) throws(StoreError) -> T {
        let result: T
        do {
            result = try pool.writeWithoutTransaction { db in
                // Checked on the writer, which runs `close` too: no write starts after it.
                guard !closed.withLock({ $0 }) else { throw StoreError.closed }
                let changesBefore = db.totalChangesCount
                var result: T?
                // BEGIN and COMMIT from the connection's statement cache: GRDB's `inTransaction`
                // prepares both anew for every transaction, and a save takes three (~33K
                // instructions a save, issue 40).
                try db.cachedStatement(sql: "BEGIN IMMEDIATE TRANSACTION").execute()
                do {
                    result = try body(db)
                    try db.cachedStatement(sql: "COMMIT TRANSACTION").execute()
                } catch {
                    // SQLite rolled back already when it aborted the transaction itself (I/O, full disk).
                    if db.isInsideTransaction { try? db.execute(sql: "ROLLBACK TRANSACTION") }
                    throw error
                }
                // A commit that wrote nothing has nothing to sync.
                if db.totalChangesCount != changesBefore {
                    syncProgress.withLock { $0.commits += 1 }
                }
                guard let result else { throw StoreError.database("write transaction produced no result") }
                return result
            }
        } catch {
            throw StoreError(error)
        }
        // Outside the writer: other writes go on while the disk flushes (the WAL is ordered, so
        // the fsync also covers every write before this one).
        if durability == .synced { try syncDeferredWrites() }
        return result
    }

    /// Whether a `.deferred` write waits for `syncDeferredWrites` (or the next synced write).
    public var hasUnsyncedWrites: Bool {
        hasUnsyncedWrites(through: committedWrites)
    }

    /// Whether one of the first `count` committed writes waits for `syncDeferredWrites`.
    public func hasUnsyncedWrites(through count: UInt64) -> Bool {
        syncProgress.withLock { count > $0.syncedThrough }
    }

    /// Makes every `.deferred` write so far survive a power loss too: what fsync(2) of a mounted
    /// file promises for the saves, creates and renames that came before it.
    ///
    /// It fsyncs the WAL, as a synchronous=FULL commit does after writing its frames, but
    /// without holding the writer: saves and acknowledgements go on while the disk flushes.
    public func syncDeferredWrites() throws(StoreError) {
        try syncDeferredWrites(through: committedWrites)
    }

    /// How many write transactions that changed something have committed so far: a caller
    /// that needs only those on disk passes the count to `syncDeferredWrites(through:)` later.
    public var committedWrites: UInt64 {
        syncProgress.withLock { $0.commits }
    }

    /// Makes the first `count` committed writes survive a power loss: nothing to do when an
    /// fsync of the WAL since covered them.
    public func syncDeferredWrites(through count: UInt64) throws(StoreError) {
        // Every commit counted here has its frames in the WAL file already.
        let target = syncProgress.withLock { count > $0.syncedThrough ? $0.commits : nil }
        guard let target else { return }
        let descriptor = Glibc.open(path + "-wal", O_WRONLY | O_CLOEXEC)
        if descriptor < 0 {
            // No WAL: the last connection checkpointed it into the (synced) database file.
            if errno == ENOENT { return }
            throw StoreError.system("cannot open the WAL to sync it")
        }
        defer { Glibc.close(descriptor) }
        guard fdatasync(descriptor) == 0 else { throw StoreError.system("fsync of the WAL failed") }
        syncProgress.withLock { $0.syncedThrough = max($0.syncedThrough, target) }
    }

    /// One read from a WAL snapshot.
    func read<T>(_ body: (Database) throws -> T) throws(StoreError) -> T {
        do {
            return try pool.read { db in
                guard !closed.withLock({ $0 }) else { throw StoreError.closed }
                return try body(db)
            }
        } catch {
            throw StoreError(error)
        }
    }

    /// A read of one statement, without BEGIN and COMMIT around it: a single SELECT sees one
    /// committed state by itself. Opening a file reads its bytes this way (a `grep -r` opens
    /// every file once), where the transaction cost more than the statement.
    func readOneStatement<T>(_ body: (Database) throws -> T) throws(StoreError) -> T {
        do {
            return try pool.unsafeRead { db in
                guard !closed.withLock({ $0 }) else { throw StoreError.closed }
                return try body(db)
            }
        } catch {
            throw StoreError(error)
        }
    }

    /// The store's clock: nanoseconds since the Unix epoch.
    public static func now() -> Int64 {
        var spec = timespec()
        clock_gettime(CLOCK_REALTIME, &spec)
        return Int64(spec.tv_sec) * 1_000_000_000 + Int64(spec.tv_nsec)
    }

    /// A new change id: 32 lowercase hex digits (the reference clients send uuid4 hex).
    static func newCCID() -> String {
        var generator = SystemRandomNumberGenerator()
        let high = generator.next() as UInt64
        let low = generator.next() as UInt64
        return hex(high) + hex(low)
    }

    private static func hex(_ value: UInt64) -> String {
        let text = String(value, radix: 16)
        return String(repeating: "0", count: 16 - text.count) + text
    }
}

/// A subscriber to the store's remote events: one element per event, or one per transaction.
private enum EventSubscriber: Sendable {
    case each(AsyncStream<RemoteEvent>.Continuation)
    case batches(BatchSubscription)

    func finish() {
        switch self {
        case .each(let continuation): continuation.finish()
        case .batches(let subscription): subscription.continuation.finish()
        }
    }
}

/// A batch subscriber's stream and how many events it holds that the subscriber has not taken.
private final class BatchSubscription: Sendable {
    let continuation: AsyncStream<[RemoteEvent]>.Continuation
    let limit: Int
    private let pending = Atomic(0)

    init(continuation: AsyncStream<[RemoteEvent]>.Continuation, limit: Int) {
        self.continuation = continuation
        self.limit = limit
    }

    func offer(_ events: [RemoteEvent]) {
        // Two transactions published at once may both pass the check: the bound is loose by a batch.
        guard pending.load(ordering: .relaxed) + events.count <= limit else { return }
        pending.add(events.count, ordering: .relaxed)
        continuation.yield(events)
    }

    func taken(_ count: Int) {
        pending.subtract(count, ordering: .relaxed)
    }
}

/// Hands a batch subscriber its batches, counting each off its subscription as it goes.
private final class BatchTaker: @unchecked Sendable {
    // Used only by the stream's one consumer, one `next` at a time (AsyncStream's unfolding).
    private var iterator: AsyncStream<[RemoteEvent]>.Iterator
    private let subscription: BatchSubscription

    init(_ iterator: AsyncStream<[RemoteEvent]>.Iterator, subscription: BatchSubscription) {
        self.iterator = iterator
        self.subscription = subscription
    }

    func next() async -> [RemoteEvent]? {
        guard let batch = await iterator.next() else { return nil }
        subscription.taken(batch.count)
        return batch
    }
}
