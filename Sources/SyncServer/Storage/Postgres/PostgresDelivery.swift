import Logging
import NIOConcurrencyHelpers
import PostgresNIO

/// One node's delivery sequence on PostgreSQL (the ordering contract of `ServerStorage`): a
/// single task that hands out, in cv order and each once, the completions of this node's
/// batches, the changes other nodes commit, and the results of reads.
///
/// Invariant: every cv up to `lastDelivered` has been delivered here. Since batches of all nodes
/// commit in cv order (`PostgresServerStore`), a cv known to be committed means every lower cv
/// is committed too, so catching up is reading `changes` from `lastDelivered` on. Changes of
/// this node's own batches are never read that way: a batch registers its cvs before its commit
/// (`registerPending`), reading stops below them, and the batch's completions deliver them.
final class PostgresDelivery: Sendable {
    private enum Event: Sendable {
        case committed(batch: [CommitQueueItem], verdicts: [Result<ChangeVerdict<StoredChange>, any Error>?], cvs: ClosedRange<Int64>?)
        case notified(Int64)
        case poll
        case read(Read)
    }

    /// A read whose result goes out in line with broadcasts.
    struct Read: Sendable {
        var perform: @Sendable (PostgresConnection, Logger) async throws -> @Sendable () -> Void
        var continuation: CheckedContinuation<Void, any Error>
    }

    /// A read's delivery, waiting until every change up to `cv` (its snapshot) is delivered.
    private struct Barrier {
        var cv: Int64
        var deliver: @Sendable () -> Void
        var continuation: CheckedContinuation<Void, any Error>
    }

    private struct State {
        var lastDelivered: Int64
        /// The newest cv known to be committed (notified, polled or seen by a read).
        var knownCommitted: Int64
        var barriers: [Barrier] = []
    }

    /// Changes read from the database per query while catching up.
    static let pageSize = 500

    private let client: PostgresClient
    private let logger: Logger
    private let start: Int64
    private let events: AsyncStream<Event>
    private let eventSink: AsyncStream<Event>.Continuation
    private let pending = NIOLockedValueBox<[ClosedRange<Int64>]>([])
    /// Whether a poll is queued: polls while the database is down (each waiting for a
    /// connection) must not pile up in the event stream.
    private let pollQueued = NIOLockedValueBox(false)
    private let foreign = NIOLockedValueBox<ForeignHandler?>(nil)

    /// The handler in a struct: a closure that is itself the box's value is wrapped in two
    /// reabstraction thunks each time `withLockedValue` hands it out (its `inout` is generic),
    /// and the wrapped one is stored back, so every delivery made the next one two thunks deeper.
    private struct ForeignHandler: Sendable {
        let publish: @Sendable (Int64, StoredChange) -> Void
    }

    init(client: PostgresClient, lastDelivered: Int64, logger: Logger) {
        self.client = client
        self.logger = logger
        self.start = lastDelivered
        (events, eventSink) = AsyncStream<Event>.makeStream()
    }

    // MARK: - Inputs

    func setForeignHandler(_ handler: @escaping @Sendable (Int64, StoredChange) -> Void) {
        foreign.withLockedValue { $0 = ForeignHandler(publish: handler) }
    }

    /// A batch's cvs, about to be committed: catching up stops below them.
    func registerPending(_ cvs: ClosedRange<Int64>) {
        pending.withLockedValue { $0.append(cvs) }
    }

    /// A registered batch whose commit failed: if it did commit after all, its changes are
    /// delivered like another node's.
    func abandon(_ cvs: ClosedRange<Int64>) {
        pending.withLockedValue { $0.removeAll { $0 == cvs } }
        poll()
    }

    /// A batch of this node is over: committed (`cvs`: its changes' cvs) or failed.
    func committed(_ batch: [CommitQueueItem], verdicts: [Result<ChangeVerdict<StoredChange>, any Error>?], cvs: ClosedRange<Int64>?) {
        eventSink.yield(.committed(batch: batch, verdicts: verdicts, cvs: cvs))
    }

    /// Another node committed changes up to `cv`.
    func notified(upTo cv: Int64) {
        eventSink.yield(.notified(cv))
    }

    /// Looks for committed changes not delivered yet (missed notifications).
    func poll() {
        let queue = pollQueued.withLockedValue { queued in
            defer { queued = true }
            return !queued
        }
        if queue { eventSink.yield(.poll) }
    }

    /// Runs `perform` on one snapshot and its returned delivery in line with broadcasts:
    /// after every change the snapshot holds, before any later one. Returns once delivered.
    func read(_ perform: @escaping @Sendable (PostgresConnection, Logger) async throws -> @Sendable () -> Void) async throws {
        try await withCheckedThrowingContinuation { continuation in
            if case .terminated = eventSink.yield(.read(Read(perform: perform, continuation: continuation))) {
                continuation.resume(throwing: SyncServerError.storage("server store closed"))
            }
        }
    }

    func finish() {
        eventSink.finish()
    }

    // MARK: - The sequence

    func run() async {
        var state = State(lastDelivered: start, knownCommitted: start)
        for await event in events {
            switch event {
            case .committed(let batch, let verdicts, let cvs):
                await deliverBatch(batch, verdicts: verdicts, cvs: cvs, state: &state)
            case .notified(let cv):
                _ = await advance(to: cv, state: &state)
            case .poll:
                pollQueued.withLockedValue { $0 = false }
                do {
                    let cv = try await PostgresServerStore.lastChangeVersion(client, logger: logger)
                    _ = await advance(to: cv, state: &state)
                } catch {
                    logger.debug("poll failed", metadata: ["error": "\(error)"])
                }
            case .read(let read):
                await perform(read, state: &state)
            }
        }
        for barrier in state.barriers {
            barrier.continuation.resume(throwing: SyncServerError.storage("server store closed"))
        }
    }

    private func deliverBatch(
        _ batch: [CommitQueueItem], verdicts: [Result<ChangeVerdict<StoredChange>, any Error>?], cvs: ClosedRange<Int64>?,
        state: inout State
    ) async {
        if let cvs {
            // Other nodes' changes below this batch go first; they are committed, so only a
            // database failure stops this, and it is tried again until it works.
            var delay: Duration = .milliseconds(50)
            while await !advance(to: cvs.lowerBound - 1, state: &state) || state.lastDelivered < cvs.lowerBound - 1 {
                if Task.isCancelled { return }
                try? await Task.sleep(for: delay)
                delay = min(delay * 2, .seconds(2))
            }
            pending.withLockedValue { $0.removeAll { $0 == cvs } }
        }
        CommitQueueItem.answer(batch, verdicts: verdicts)
        if let cvs {
            state.lastDelivered = cvs.upperBound
            state.knownCommitted = max(state.knownCommitted, cvs.upperBound)
            runBarriers(upTo: state.lastDelivered, state: &state)
            // Changes of other nodes held back behind this batch.
            _ = await advance(to: state.knownCommitted, state: &state)
        }
    }

    private func perform(_ read: Read, state: inout State) async {
        let logger = self.logger
        do {
            let perform = read.perform
            let (snapshotCV, deliver) = try await client.withAvailableConnection("reading") { connection in
                try await connection.query("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", logger: logger)
                do {
                    let cv = try await PostgresRows.one(
                        connection.query("SELECT last_cv FROM server_state WHERE id = 1", logger: logger), as: Int64.self) ?? 0
                    let deliver = try await perform(connection, logger)
                    try await connection.query("COMMIT", logger: logger)
                    return (cv, deliver)
                } catch {
                    // Never on a dropped connection: postgres-nio leaves that statement unanswered.
                    if PostgresAvailability.connectionIsUsable(after: error) { _ = try? await connection.query("ROLLBACK", logger: logger) }
                    throw error
                }
            }
            let barrier = Barrier(cv: snapshotCV, deliver: deliver, continuation: read.continuation)
            let index = state.barriers.firstIndex { $0.cv > snapshotCV } ?? state.barriers.endIndex
            state.barriers.insert(barrier, at: index)
            _ = await advance(to: snapshotCV, state: &state)
            runBarriers(upTo: state.lastDelivered, state: &state)
        } catch {
            read.continuation.resume(throwing: error)
        }
    }

    /// Delivers other nodes' changes up to `target` (below any batch of this node still
    /// committing). Returns false when the database could not be read.
    private func advance(to target: Int64, state: inout State) async -> Bool {
        state.knownCommitted = max(state.knownCommitted, target)
        var cap = state.knownCommitted
        if let lowest = pending.withLockedValue({ $0.map(\.lowerBound).min() }) { cap = min(cap, lowest - 1) }
        let publish = foreign.withLockedValue { $0 }?.publish
        do {
            while state.lastDelivered < cap {
                let rows = try await client.rows("""
                    SELECT \(unescaped: PostgresServerStore.changeColumns) FROM changes
                    WHERE cv > \(state.lastDelivered) AND cv <= \(cap) ORDER BY cv LIMIT \(Self.pageSize)
                    """, "reading other nodes' changes", logger: logger)
                for row in rows {
                    let (bucketID, change) = try PostgresServerStore.storedChange(from: row)
                    runBarriers(upTo: change.cv - 1, state: &state)
                    publish?(bucketID, change)
                    state.lastDelivered = change.cv
                }
                if rows.count < Self.pageSize { state.lastDelivered = cap }
            }
        } catch {
            logger.warning("reading other nodes' changes failed; trying again", metadata: ["error": "\(error)"])
            return false
        }
        runBarriers(upTo: state.lastDelivered, state: &state)
        return true
    }

    private func runBarriers(upTo cv: Int64, state: inout State) {
        while let first = state.barriers.first, first.cv <= cv {
            state.barriers.removeFirst()
            first.deliver()
            first.continuation.resume()
        }
    }
}
