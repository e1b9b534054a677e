import Foundation
import JSONDiff
import Logging
import NIOConcurrencyHelpers
import PostgresNIO
import SyncProtocol

/// The payload of a NOTIFY on `PostgresServerStore.notifyChannel`: the batch's newest cv, then
/// the buckets it changed (`bucket:cv`) while they fit PostgreSQL's 8000-byte payload limit
/// (past it, `*`: any bucket). Receivers read the changes themselves from the database, from
/// the last cv they delivered, so the list is for people watching the channel (`LISTEN`).
enum PostgresNotice {
    static let maxPayloadBytes = 7_999

    static func payload(newestCV: Int64, buckets: [Int64: Int64]) -> String {
        var text = String(newestCV)
        for (bucket, cv) in buckets.sorted(by: { $0.key < $1.key }) {
            let item = " \(bucket):\(cv)"
            guard text.utf8.count + item.utf8.count + 2 <= maxPayloadBytes else { return text + " *" }
            text += item
        }
        return text
    }

    /// The cv a notification says is committed.
    static func committedCV(_ payload: String) -> Int64? {
        Int64(payload.prefix { $0 != " " })
    }
}

/// Commits batches of queued changes on PostgreSQL, one batch at a time per node.
struct PostgresChangeWriter: Sendable {
    let client: PostgresClient
    let delivery: PostgresDelivery
    let logger: Logger

    /// Attempts of a batch that failed on a serialization failure or a deadlock.
    static let maxAttempts = 8

    /// Commits `batch` as one transaction and hands its verdicts to the delivery sequence.
    func commit(_ batch: [CommitQueueItem]) async {
        let hasChanges = batch.contains { if case .change = $0 { true } else { false } }
        guard hasChanges else {
            delivery.committed(batch, verdicts: batch.map { _ in nil }, cvs: nil)
            return
        }
        var attempt = 1
        while true {
            let registered = NIOLockedValueBox<ClosedRange<Int64>?>(nil)
            do {
                let (verdicts, cvs) = try await client.withAvailableConnection("committing changes") { connection in
                    try await commitOnce(batch, connection: connection) { cvs in registered.withLockedValue { $0 = cvs } }
                }
                delivery.committed(batch, verdicts: verdicts, cvs: cvs)
                return
            } catch {
                // A batch whose COMMIT got no answer may have committed: its changes are then
                // delivered as another node's, and a client resending one is told it is a
                // duplicate (dedup by clientid+ccid), which it takes as the acknowledgement.
                if let cvs = registered.withLockedValue({ $0 }) { delivery.abandon(cvs) }
                if attempt < Self.maxAttempts, Self.isRetryable(error) {
                    // Another transaction won; nothing of this batch is stored: run it again.
                    attempt += 1
                    try? await Task.sleep(for: .milliseconds(Int64.random(in: 1...(5 * Int64(attempt)))))
                    continue
                }
                if batch.count > 1, Self.isAboutData(error) {
                    // One change's data failed a statement of the whole batch: store them one
                    // at a time, so that change fails alone.
                    for item in batch { await commit([item]) }
                    return
                }
                logger.error("batch of changes failed", metadata: ["error": "\(String(reflecting: error))", "changes": "\(batch.count)"])
                delivery.committed(batch, verdicts: batch.map { _ in .failure(error) }, cvs: nil)
                return
            }
        }
    }

    /// Serialization failures and deadlocks: the transaction was rolled back, try it again.
    static func isRetryable(_ error: any Error) -> Bool {
        let state = sqlState(error)
        return state == "40001" || state == "40P01"
    }

    /// Errors about the data of a change (PostgreSQL's classes 22 data exception, 23 integrity
    /// violation, 54 program limit): the database is fine, one change of the batch is not.
    static func isAboutData(_ error: any Error) -> Bool {
        guard let state = sqlState(error) else { return false }
        return state.hasPrefix("22") || state.hasPrefix("23") || state.hasPrefix("54")
    }

    static func sqlState(_ error: any Error) -> String? {
        if let error = error as? PSQLError { return error.serverInfo?[.sqlState] }
        if let error = error as? PostgresTransactionError {
            return [error.closureError, error.commitError, error.beginError].lazy.compactMap { $0.flatMap(sqlState) }.first
        }
        return nil
    }

    private func commitOnce(
        _ batch: [CommitQueueItem], connection: PostgresConnection, register: @Sendable (ClosedRange<Int64>) -> Void
    ) async throws -> ([Result<ChangeVerdict<StoredChange>, any Error>?], ClosedRange<Int64>?) {
        try await connection.query("BEGIN", logger: logger)
        do {
            // The cv counter's row lock orders this batch after every batch committed so far
            // (on any node) and before any later one; everything below reads their effects.
            let lastCV = try await PostgresRows.one(
                connection.query("SELECT last_cv FROM server_state WHERE id = 1 FOR UPDATE", logger: logger), as: Int64.self) ?? 0
            let changes = batch.compactMap { item -> PendingChange? in
                if case .change(let pending) = item { pending } else { nil }
            }
            var plan = PostgresBatchPlan(lastCV: lastCV, reads: try await read(changes, connection: connection))
            let results = batch.map { item -> Result<ChangeVerdict<StoredChange>, any Error>? in
                guard case .change(let pending) = item else { return nil }
                return Result { try plan.apply(pending) }
            }
            try await write(plan, connection: connection)
            let cvs = plan.lastCV > lastCV ? (lastCV + 1)...plan.lastCV : nil
            if let cvs {
                var buckets: [Int64: Int64] = [:]
                for (bucketID, change) in plan.changeWrites { buckets[bucketID] = change.cv }
                let payload = PostgresNotice.payload(newestCV: plan.lastCV, buckets: buckets)
                try await connection.query("SELECT pg_notify(\(PostgresServerStore.notifyChannel), \(payload))", logger: logger)
                // Before the commit makes them visible: this node's delivery then waits for
                // this batch instead of delivering its changes as another node's.
                delivery.registerPending(cvs)
                register(cvs)
            }
            try await connection.query("COMMIT", logger: logger)
            return (results, cvs)
        } catch {
            if PostgresAvailability.connectionIsUsable(after: error) { _ = try? await connection.query("ROLLBACK", logger: logger) }
            throw error
        }
    }

    /// What the batch's changes depend on: three or four queries for the whole batch.
    private func read(_ changes: [PendingChange], connection: PostgresConnection) async throws -> PostgresBatchReads {
        var reads = PostgresBatchReads()
        let ccids = Array(Set(changes.map { ClientChangeID(bucketID: $0.bucket.id, clientID: $0.clientID, ccid: $0.change.ccid) }))
        let ccidBuckets = ccids.map(\.bucketID), ccidClients = ccids.map(\.clientID), ccidValues = ccids.map(\.ccid)
        for row in try await PostgresRows.rows(connection.query("""
            SELECT a.bucket_id, a.client_id, a.ccid FROM applied_ccids a
            JOIN unnest(\(ccidBuckets), \(ccidClients), \(ccidValues)) AS t(b, c, cc) ON a.bucket_id = t.b AND a.client_id = t.c AND a.ccid = t.cc
            """, logger: logger)) {
            let (bucketID, clientID, ccid) = try row.decode((Int64, String, String).self)
            reads.applied.insert(ClientChangeID(bucketID: bucketID, clientID: clientID, ccid: ccid))
        }
        for row in try await PostgresRows.rows(connection.query("""
            SELECT r.bucket_id, r.client_id, r.ccid, r.fingerprint, r.code FROM refused_ccids r
            JOIN unnest(\(ccidBuckets), \(ccidClients), \(ccidValues)) AS t(b, c, cc) ON r.bucket_id = t.b AND r.client_id = t.c AND r.ccid = t.cc
            """, logger: logger)) {
            let (bucketID, clientID, ccid, fingerprint, code) = try row.decode((Int64, String, String, Data, Int).self)
            reads.refused[ClientChangeID(bucketID: bucketID, clientID: clientID, ccid: ccid)] = (fingerprint, code)
        }
        let entities = Array(Set(changes.map { BucketEntity(bucketID: $0.bucket.id, key: $0.change.id) }))
        for row in try await PostgresRows.rows(connection.query("""
            SELECT e.bucket_id, e.key, e.version, e.data FROM entities e
            JOIN unnest(\(entities.map(\.bucketID)), \(entities.map(\.key))) AS t(b, k) ON e.bucket_id = t.b AND e.key = t.k
            """, logger: logger)) {
            let (bucketID, key, version, data) = try row.decode((Int64, String, Int, String?).self)
            reads.entities[BucketEntity(bucketID: bucketID, key: key)] = (version, data)
        }
        let wanted = PostgresBatchPlan.versionsToRead(changes, entities: reads.entities).flatMap { entity, versions in
            versions.map { (entity, $0) }
        }
        if !wanted.isEmpty {
            for row in try await PostgresRows.rows(connection.query("""
                SELECT ev.bucket_id, ev.key, ev.version, ev.data FROM entity_versions ev
                JOIN unnest(\(wanted.map(\.0.bucketID)), \(wanted.map(\.0.key)), \(wanted.map(\.1))) AS t(b, k, v)
                ON ev.bucket_id = t.b AND ev.key = t.k AND ev.version = t.v
                """, logger: logger)) {
                let (bucketID, key, version, data) = try row.decode((Int64, String, Int, String).self)
                reads.versions[BucketEntity(bucketID: bucketID, key: key), default: [:]][version] = data
            }
        }
        return reads
    }

    /// Stores what the plan decided: one multi-row statement per table (and a compaction of
    /// any bucket whose change log outgrew its retention).
    private func write(_ plan: PostgresBatchPlan, connection: PostgresConnection) async throws {
        if !plan.refusalWrites.isEmpty {
            // Rare (a refused change the sender may send again): one statement each.
            for (ccid, refusal) in plan.refusalWrites {
                try await connection.query("""
                    INSERT INTO refused_ccids (bucket_id, client_id, ccid, cv, fingerprint, code)
                    VALUES (\(ccid.bucketID), \(ccid.clientID), \(ccid.ccid), \(refusal.cv), \(refusal.fingerprint), \(refusal.code))
                    ON CONFLICT (bucket_id, client_id, ccid) DO UPDATE SET cv = excluded.cv, fingerprint = excluded.fingerprint, code = excluded.code
                    """, logger: logger)
            }
        }
        let changes = plan.changeWrites
        guard !changes.isEmpty else { return }
        try await connection.query("UPDATE server_state SET last_cv = \(plan.lastCV) WHERE id = 1", logger: logger)

        let entities = Array(plan.entityWrites)
        try await connection.query("""
            INSERT INTO entities (bucket_id, key, version, data)
            SELECT b, k, v, CASE WHEN live THEN d END
            FROM unnest(\(entities.map(\.key.bucketID)), \(entities.map(\.key.key)), \(entities.map(\.value.version)),
                        \(entities.map { $0.value.data ?? "" }), \(entities.map { $0.value.data != nil })) AS t(b, k, v, d, live)
            ON CONFLICT (bucket_id, key) DO UPDATE SET version = excluded.version, data = excluded.data
            """, logger: logger)

        let kept = plan.keptVersionWrites
        if !kept.isEmpty {
            try await connection.query("""
                INSERT INTO entity_versions (bucket_id, key, version, data, accepted_at)
                SELECT b, k, v, d, EXTRACT(EPOCH FROM clock_timestamp())
                FROM unnest(\(kept.map(\.entity.bucketID)), \(kept.map(\.entity.key)), \(kept.map(\.version)), \(kept.map(\.data))) AS t(b, k, v, d)
                ON CONFLICT (bucket_id, key, version) DO UPDATE SET data = excluded.data, accepted_at = excluded.accepted_at
                """, logger: logger)
        }
        let floors = Array(plan.historyFloors)
        if !floors.isEmpty {
            try await connection.query("""
                DELETE FROM entity_versions ev USING unnest(\(floors.map(\.key.bucketID)), \(floors.map(\.key.key)), \(floors.map(\.value))) AS t(b, k, v)
                WHERE ev.bucket_id = t.b AND ev.key = t.k AND ev.version <= t.v
                """, logger: logger)
        }

        let stored = changes.map(\.change)
        try await connection.query("""
            INSERT INTO changes (cv, bucket_id, key, client_id, ccid, operation, diff, source_version, end_version)
            SELECT cv, b, k, c, cc, op, CASE WHEN has_diff THEN d END, NULLIF(sv, 0), ev
            FROM unnest(\(stored.map(\.cv)), \(changes.map(\.bucketID)), \(stored.map(\.key)), \(stored.map(\.clientID)),
                        \(stored.map(\.ccid)), \(stored.map(\.operation.rawValue)),
                        \(stored.map { $0.diff.map { JSONDiffing.encode($0).compactRendered() } ?? "" }), \(stored.map { $0.diff != nil }),
                        \(stored.map { $0.sourceVersion ?? 0 }), \(stored.map(\.endVersion))) AS t(cv, b, k, c, cc, op, d, has_diff, sv, ev)
            """, logger: logger)
        try await connection.query("""
            INSERT INTO applied_ccids (bucket_id, client_id, ccid, cv)
            SELECT * FROM unnest(\(changes.map(\.bucketID)), \(stored.map(\.clientID)), \(stored.map(\.ccid)), \(stored.map(\.cv)))
            """, logger: logger)

        let buckets = Array(plan.bucketCounts)
        let counts = try await PostgresRows.rows(connection.query("""
            UPDATE buckets SET change_count = change_count + t.n
            FROM unnest(\(buckets.map(\.key)), \(buckets.map(\.value.added))) AS t(id, n) WHERE buckets.id = t.id
            RETURNING buckets.id, buckets.change_count
            """, logger: logger))
        for row in counts {
            let (bucketID, count) = try row.decode((Int64, Int64).self)
            guard let limits = plan.bucketCounts[bucketID]?.limits else { continue }
            // Compact in batches (an eighth of the retention at a time), as the SQLite store does.
            if count > Int64(limits.changeLogRetention + max(1, limits.changeLogRetention / 8)) {
                try await PostgresServerStore.compact(connection, bucketID: bucketID, keepingLast: limits.changeLogRetention, logger: logger)
            }
        }
    }
}

extension PostgresServerStore {
    /// Keeps the newest `keepingLast` changes of a bucket (as `ServerStore.compact`).
    @discardableResult
    static func compact(_ connection: PostgresConnection, bucketID: Int64, keepingLast: Int, logger: Logger) async throws -> Int {
        let cutoff = try await PostgresRows.one(connection.query(
            "SELECT cv FROM changes WHERE bucket_id = \(bucketID) ORDER BY cv DESC LIMIT 1 OFFSET \(keepingLast)", logger: logger), as: Int64.self)
        guard let cutoff else { return 0 }
        // The cutoff becomes the base: clients handed its cv (with its change's tag) catch up from it.
        let last = try await PostgresRows.rows(connection.query(
            "SELECT key, ccid, end_version FROM changes WHERE bucket_id = \(bucketID) AND cv = \(cutoff)", logger: logger)).first
        let baseTag = try last.map { row -> Int64 in
            let (key, ccid, endVersion) = try row.decode((String, String, Int).self)
            return Int64(bitPattern: ChangeSequence.tag(key: key, ccid: ccid, endVersion: endVersion))
        }
        let dropped = try await PostgresRows.all(connection.query(
            "DELETE FROM changes WHERE bucket_id = \(bucketID) AND cv <= \(cutoff) RETURNING cv", logger: logger), as: Int64.self).count
        let previousBase = try await PostgresRows.one(connection.query(
            "SELECT base_cv FROM buckets WHERE id = \(bucketID)", logger: logger), as: Int64.self) ?? 0
        try await connection.query("DELETE FROM applied_ccids WHERE bucket_id = \(bucketID) AND cv <= \(previousBase)", logger: logger)
        try await connection.query("DELETE FROM refused_ccids WHERE bucket_id = \(bucketID) AND cv <= \(previousBase)", logger: logger)
        try await connection.query("""
            UPDATE buckets SET base_cv = \(cutoff), base_tag = \(baseTag), ccid_floor = \(previousBase),
                change_count = (SELECT COUNT(*) FROM changes WHERE bucket_id = \(bucketID)) WHERE id = \(bucketID)
            """, logger: logger)
        return dropped
    }

    /// Drops all but the newest `keepingLast` changes of a user's bucket from the change log.
    @discardableResult
    public func compactChangeLog(username: String, bucket name: String, keepingLast: Int) async throws -> Int {
        let logger = self.logger
        return try await client.withTransaction(logger: logger) { connection in
            // The cv lock keeps compaction out of a batch's way, as the SQLite writer does.
            try await connection.query("SELECT last_cv FROM server_state WHERE id = 1 FOR UPDATE", logger: logger)
            let bucketID = try await PostgresRows.one(connection.query("""
                SELECT buckets.id FROM buckets JOIN users ON users.id = buckets.user_id WHERE users.username = \(username) AND buckets.name = \(name)
                """, logger: logger), as: Int64.self)
            guard let bucketID else { return 0 }
            return try await Self.compact(connection, bucketID: bucketID, keepingLast: max(0, keepingLast), logger: logger)
        }
    }
}
