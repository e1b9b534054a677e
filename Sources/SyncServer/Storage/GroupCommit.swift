import GRDB
import NIOConcurrencyHelpers
import SyncProtocol

/// One entry of the group-commit queue.
enum CommitQueueItem: Sendable {
    /// A change to apply; `completion` runs after the batch's commit (or failure), on the
    /// store's serial completion queue, in queue order: accepted changes are durable before it runs.
    case change(PendingChange)
    /// Runs in queue order after the batch's commit; keeps a reply that needs no storage (a
    /// malformed change's rejection) behind the acknowledgements of changes sent before it.
    case inLine(@Sendable () -> Void)

    var isChange: Bool {
        if case .change = self { true } else { false }
    }
}

extension CommitQueueItem {
    /// Answers a committed batch in queue order: each change with its verdict (none: the
    /// batch failed before reaching it), each in-line action run.
    static func answer(_ batch: [CommitQueueItem], verdicts: [Result<ChangeVerdict<StoredChange>, any Error>?]) {
        for (index, item) in batch.enumerated() {
            switch item {
            case .change(let pending):
                pending.completion(verdicts[index] ?? .failure(SyncServerError.storage("change skipped")))
            case .inLine(let action):
                action()
            }
        }
    }
}

/// A store that commits changes in groups: what it queues is answered in queue order after
/// the commit that holds it (the ordering `ServerStorage` promises).
protocol GroupCommitting {
    func enqueue(_ item: CommitQueueItem)
}

extension GroupCommitting {
    /// Queues `change` for the next group commit and returns at once. `completion` runs once
    /// the change is durable (or refused, or failed), in submission order across all
    /// connections, so publishing from it broadcasts changes in cv order and never before they
    /// are durable.
    func submit(
        _ change: ChangeRequest, clientID: String, bucket: BucketHandle, limits: ChangeLimits,
        completion: @escaping @Sendable (Result<ChangeVerdict<StoredChange>, any Error>) -> Void
    ) {
        enqueue(.change(PendingChange(change: change, clientID: clientID, bucket: bucket, limits: limits, completion: completion)))
    }

    /// Runs `action` in the completion sequence after every change submitted before it has completed.
    func submitInLine(_ action: @escaping @Sendable () -> Void) {
        enqueue(.inLine(action))
    }
}

/// A change waiting for the next group commit.
struct PendingChange: Sendable {
    var change: ChangeRequest
    var clientID: String
    var bucket: BucketHandle
    var limits: ChangeLimits
    var completion: @Sendable (Result<ChangeVerdict<StoredChange>, any Error>) -> Void
}

/// Changes waiting for the writer queue. Whoever reaches the writer first takes everything
/// queued and commits it as one transaction: with WAL and synchronous=FULL every commit costs an
/// fsync (milliseconds on real disks), so one fsync per change would cap the server at a few
/// hundred changes per second, while one per batch scales with the number of changes in flight.
final class CommitQueue: Sendable {
    private let items = NIOLockedValueBox<[CommitQueueItem]>([])
    /// Told the number of changes of each batch taken (`/metrics`).
    private let batchObserver = NIOLockedValueBox<(@Sendable (_ changes: Int) -> Void)?>(nil)

    func observeBatches(_ observer: @escaping @Sendable (_ changes: Int) -> Void) {
        batchObserver.withLockedValue { $0 = observer }
    }

    /// The most changes one transaction takes; the rest wait for the next access (also queued).
    static let maxBatch = 1_000

    func append(_ item: CommitQueueItem) {
        items.withLockedValue { $0.append(item) }
    }

    func takeBatch() -> [CommitQueueItem] {
        let batch = takeItems()
        let changes = batch.count(where: \.isChange)
        if changes > 0, let observer = batchObserver.withLockedValue({ $0 }) { observer(changes) }
        return batch
    }

    private func takeItems() -> [CommitQueueItem] {
        items.withLockedValue { items in
            if items.count <= Self.maxBatch {
                defer { items.removeAll(keepingCapacity: true) }
                return items
            }
            let batch = Array(items.prefix(Self.maxBatch))
            items.removeFirst(Self.maxBatch)
            return batch
        }
    }
}

extension ServerStore: GroupCommitting {
    /// Applies one change and waits for its verdict (`publish` runs first, after the commit).
    func apply(
        _ change: ChangeRequest, clientID: String, bucket: BucketHandle, limits: ChangeLimits,
        publish: @escaping @Sendable (StoredChange) -> Void
    ) async throws -> ChangeVerdict<StoredChange> {
        try await withCheckedThrowingContinuation { continuation in
            submit(change, clientID: clientID, bucket: bucket, limits: limits) { result in
                if case .success(.accepted(let stored)) = result { publish(stored) }
                continuation.resume(with: result)
            }
        }
    }

    func enqueue(_ item: CommitQueueItem) {
        commitQueue.append(item)
        // One writer access per item, so every item is taken by some access; most find the
        // queue already emptied by an earlier one and return at once.
        pool.asyncWriteWithoutTransaction { [self] db in
            commitBatch(db, commitQueue.takeBatch())
        }
    }

    private func commitBatch(_ db: Database, _ batch: [CommitQueueItem]) {
        guard !batch.isEmpty else { return }
        var results: [Result<ChangeVerdict<StoredChange>, any Error>?] = batch.map { _ in nil }
        if batch.contains(where: \.isChange) {
            do {
                if let whole = try Self.commit(db, batch, eachInSavepoint: false) {
                    results = whole
                } else if let each = try Self.commit(db, batch, eachInSavepoint: true) {
                    results = each
                }
            } catch {
                // The commit failed: nothing of this batch is durable.
                results = batch.map { _ in .failure(error) }
            }
        }
        // Everything in `results` is durable now; answering it is the completion queue's work
        // (serial, batches in commit order), so the writer can start the next batch meanwhile.
        let verdicts = results
        completionQueue.async { CommitQueueItem.answer(batch, verdicts: verdicts) }
    }

    /// The batch as one transaction. Without a savepoint per change first: a refusal writes
    /// nothing (`applyInTransaction`), so only an error needs one, and a savepoint per change cost
    /// each change a sixth of the server's work (SQLite's statement journal). Then nil, with
    /// nothing written, when a change failed with an error; `eachInSavepoint` commits the batch
    /// again with a savepoint per change, which rolls back only the change that fails.
    private static func commit(
        _ db: Database, _ batch: [CommitQueueItem], eachInSavepoint: Bool
    ) throws -> [Result<ChangeVerdict<StoredChange>, any Error>?]? {
        var results: [Result<ChangeVerdict<StoredChange>, any Error>?] = []
        results.reserveCapacity(batch.count)
        // BEGIN and COMMIT from the connection's statement cache: GRDB's `inTransaction`
        // prepares both anew for every transaction (issue 40).
        try db.cachedStatement(sql: "BEGIN IMMEDIATE TRANSACTION").execute()
        do {
            var counters = try ChangeCounters(db)
            for item in batch {
                guard case .change(let pending) = item else {
                    results.append(nil)
                    continue
                }
                if eachInSavepoint {
                    results.append(applyInSavepoint(db, pending, counters: &counters))
                    continue
                }
                do {
                    results.append(.success(try apply(db, pending, counters: &counters)))
                } catch {
                    try rollBack(db)
                    return nil
                }
            }
            // After an error SQLite may have rolled back the whole transaction (disk full, I/O).
            if db.isInsideTransaction {
                try counters.write(db)
                try db.cachedStatement(sql: "COMMIT TRANSACTION").execute()
            }
        } catch {
            try? rollBack(db)
            throw error
        }
        return results
    }

    /// Rolls back the transaction `commit` began, unless SQLite did already.
    private static func rollBack(_ db: Database) throws {
        if db.isInsideTransaction { try db.execute(sql: "ROLLBACK TRANSACTION") }
    }

    private static func applyInSavepoint(
        _ db: Database, _ pending: PendingChange, counters: inout ChangeCounters
    ) -> Result<ChangeVerdict<StoredChange>, any Error> {
        // SQLite may roll back the whole transaction on some errors (disk full, I/O): then
        // nothing else may run, or it would commit on its own outside the batch.
        guard db.isInsideTransaction else { return .failure(SyncServerError.storage("transaction aborted")) }
        let before = counters
        do {
            var verdict: ChangeVerdict<StoredChange> = .refused(.internalError)
            try db.inSavepoint {
                verdict = try apply(db, pending, counters: &counters)
                return .commit
            }
            return .success(verdict)
        } catch {
            counters = before
            return .failure(error)
        }
    }

    /// One change of a batch; a refusal is remembered for its ccid.
    private static func apply(_ db: Database, _ pending: PendingChange, counters: inout ChangeCounters) throws -> ChangeVerdict<StoredChange> {
        let verdict = try applyInTransaction(
            db, pending.change, clientID: pending.clientID, bucket: pending.bucket, limits: pending.limits, counters: &counters)
        if case .refused(let code) = verdict {
            try RefusedCCIDs.remember(
                db, pending.change, clientID: pending.clientID, bucketID: pending.bucket.id, code: code,
                lastChangeVersion: counters.lastChangeVersion)
        }
        return verdict
    }
}
