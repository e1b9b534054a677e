import Foundation
import JSONDiff
import Logging
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
            var registered: ClosedRange<Int64>?
            do {
                let (verdicts, cvs) = try await client.withConnection { connection in
                    try await commitOnce(batch, connection: connection) { registered = $0 }
                }
                delivery.committed(batch, verdicts: verdicts, cvs: cvs)
                return
            } catch {
                if let registered { delivery.abandon(registered) }
                if attempt < Self.maxAttempts, Self.isRetryable(error) {
                    // Another transaction won; nothing of this batch is stored: run it again.
                    attempt += 1
                    try? await Task.sleep(for: .milliseconds(Int64.random(in: 1...(5 * Int64(attempt)))))
                    continue
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

    static func sqlState(_ error: any Error) -> String? {
        if let error = error as? PSQLError { return error.serverInfo?[.sqlState] }
        if let error = error as? PostgresTransactionError {
            return [error.closureError, error.commitError, error.beginError].lazy.compactMap { $0.flatMap(sqlState) }.first
        }
        return nil
    }

    private func commitOnce(
        _ batch: [CommitQueueItem], connection: PostgresConnection, register: (ClosedRange<Int64>) -> Void
    ) async throws -> ([Result<ChangeVerdict<StoredChange>, any Error>?], ClosedRange<Int64>?) {
        try await connection.query("BEGIN", logger: logger)
        do {
            // The cv counter's row lock orders this batch after every batch committed so far
            // (on any node) and before any later one; everything below reads their effects.
            let lastCV = try await PostgresRows.one(
                connection.query("SELECT last_cv FROM server_state WHERE id = 1 FOR UPDATE", logger: logger), as: Int64.self) ?? 0
            var results: [Result<ChangeVerdict<StoredChange>, any Error>?] = []
            var buckets: [Int64: Int64] = [:]
            var newest = lastCV
            for item in batch {
                guard case .change(let pending) = item else {
                    results.append(nil)
                    continue
                }
                let result = try await applyInSavepoint(pending, connection: connection)
                if case .success(.accepted(let stored)) = result {
                    newest = stored.cv
                    buckets[pending.bucket.id] = stored.cv
                }
                results.append(result)
            }
            let cvs = newest > lastCV ? (lastCV + 1)...newest : nil
            if let cvs {
                let payload = PostgresNotice.payload(newestCV: newest, buckets: buckets)
                try await connection.query("SELECT pg_notify(\(PostgresServerStore.notifyChannel), \(payload))", logger: logger)
                // Before the commit makes them visible: this node's delivery then waits for
                // this batch instead of delivering its changes as another node's.
                delivery.registerPending(cvs)
                register(cvs)
            }
            try await connection.query("COMMIT", logger: logger)
            return (results, cvs)
        } catch {
            _ = try? await connection.query("ROLLBACK", logger: logger)
            throw error
        }
    }

    /// One change of a batch; a refused change (or one failing on its own) rolls back its
    /// savepoint only. Errors that abort the whole transaction are thrown.
    private func applyInSavepoint(
        _ pending: PendingChange, connection: PostgresConnection
    ) async throws -> Result<ChangeVerdict<StoredChange>, any Error> {
        try await connection.query("SAVEPOINT change", logger: logger)
        let verdict: ChangeVerdict<StoredChange>
        do {
            verdict = try await apply(pending, connection: connection)
        } catch {
            if Self.isRetryable(error) { throw error }
            try await connection.query("ROLLBACK TO SAVEPOINT change", logger: logger)
            return .failure(error)
        }
        switch verdict {
        case .accepted:
            try await connection.query("RELEASE SAVEPOINT change", logger: logger)
        case .refused(let code):
            try await connection.query("ROLLBACK TO SAVEPOINT change", logger: logger)
            try await rememberRefusal(pending, code: code, connection: connection)
        }
        return .success(verdict)
    }

    /// The same steps as `ServerStore.applyInTransaction`, in PostgreSQL's dialect.
    private func apply(_ pending: PendingChange, connection: PostgresConnection) async throws -> ChangeVerdict<StoredChange> {
        let change = pending.change
        let bucketID = pending.bucket.id
        let clientID = pending.clientID
        let limits = pending.limits
        let alreadyApplied = try await PostgresRows.one(connection.query("""
            SELECT EXISTS (SELECT 1 FROM applied_ccids WHERE bucket_id = \(bucketID) AND client_id = \(clientID) AND ccid = \(change.ccid))
            """, logger: logger), as: Bool.self) ?? false
        if alreadyApplied { return .refused(.duplicate) }
        if let remembered = try await refusedCode(pending, connection: connection) { return .refused(remembered) }

        let currentRows = try await PostgresRows.rows(connection.query(
            "SELECT version, data FROM entities WHERE bucket_id = \(bucketID) AND key = \(change.id)", logger: logger))
        var current: EntityState?
        if let row = currentRows.first {
            let (version, text) = try row.decode((Int, String?).self)
            current = EntityState(version: version, data: try text.map { try ServerStore.decodeObject($0, what: "entity \(change.id)") })
        }
        // The resolver asks for history synchronously; a stale sv needs one older version,
        // read first when the change may need it.
        var history: [Int: JSONObject] = [:]
        if let sourceVersion = change.sourceVersion, let current, sourceVersion > 0, sourceVersion < current.version {
            let text = try await PostgresRows.one(connection.query("""
                SELECT data FROM entity_versions WHERE bucket_id = \(bucketID) AND key = \(change.id) AND version = \(sourceVersion)
                """, logger: logger), as: String.self)
            if let text { history[sourceVersion] = try ServerStore.decodeObject(text, what: "entity \(change.id).\(sourceVersion)") }
        }
        let resolved: ChangeResolution
        switch ChangeResolver.resolve(change, current: current, history: { history[$0] }) {
        case .refused(let code): return .refused(code)
        case .accepted(let value): resolved = value
        }

        let stored: StoredChange
        let cv: Int64
        switch resolved {
        case .modify(let data, let diff, let sourceVersion, let endVersion):
            let dataText = JSONValue.object(data).compactRendered()
            if dataText.utf8.count > limits.maxDocumentSize { return .refused(.documentTooLarge) }
            guard SendableNesting.fits(data: data, diff: diff) else { return .refused(.invalidRequest) }
            cv = try await nextChangeVersion(connection)
            try await connection.query("""
                INSERT INTO entities (bucket_id, key, version, data) VALUES (\(bucketID), \(change.id), \(endVersion), \(dataText))
                ON CONFLICT (bucket_id, key) DO UPDATE SET version = excluded.version, data = excluded.data
                """, logger: logger)
            try await connection.query("""
                INSERT INTO entity_versions (bucket_id, key, version, data, accepted_at)
                VALUES (\(bucketID), \(change.id), \(endVersion), \(dataText), EXTRACT(EPOCH FROM clock_timestamp()))
                ON CONFLICT (bucket_id, key, version) DO UPDATE SET data = excluded.data, accepted_at = excluded.accepted_at
                """, logger: logger)
            if endVersion > limits.historyPerEntity {
                try await connection.query("""
                    DELETE FROM entity_versions WHERE bucket_id = \(bucketID) AND key = \(change.id) AND version <= \(endVersion - limits.historyPerEntity)
                    """, logger: logger)
            }
            stored = StoredChange(
                cv: cv, key: change.id, clientID: clientID, ccid: change.ccid, operation: .modify,
                diff: diff, sourceVersion: sourceVersion, endVersion: endVersion
            )
        case .remove(let sourceVersion, let endVersion):
            cv = try await nextChangeVersion(connection)
            try await connection.query(
                "UPDATE entities SET version = \(endVersion), data = NULL WHERE bucket_id = \(bucketID) AND key = \(change.id)", logger: logger)
            stored = StoredChange(
                cv: cv, key: change.id, clientID: clientID, ccid: change.ccid, operation: .remove,
                diff: nil, sourceVersion: sourceVersion, endVersion: endVersion
            )
        }
        let diffText = stored.diff.map { JSONDiffing.encode($0).compactRendered() }
        try await connection.query("""
            INSERT INTO changes (cv, bucket_id, key, client_id, ccid, operation, diff, source_version, end_version)
            VALUES (\(cv), \(bucketID), \(stored.key), \(clientID), \(stored.ccid), \(stored.operation.rawValue), \(diffText),
                    \(stored.sourceVersion), \(stored.endVersion))
            """, logger: logger)
        try await connection.query("""
            INSERT INTO applied_ccids (bucket_id, client_id, ccid, cv) VALUES (\(bucketID), \(clientID), \(change.ccid), \(cv))
            """, logger: logger)
        let count = try await PostgresRows.one(connection.query(
            "UPDATE buckets SET change_count = change_count + 1 WHERE id = \(bucketID) RETURNING change_count", logger: logger),
            as: Int64.self) ?? 0
        // Compact in batches (an eighth of the retention at a time), as the SQLite store does.
        if count > Int64(limits.changeLogRetention + max(1, limits.changeLogRetention / 8)) {
            try await PostgresServerStore.compact(connection, bucketID: bucketID, keepingLast: limits.changeLogRetention, logger: logger)
        }
        return .accepted(stored)
    }

    private func nextChangeVersion(_ connection: PostgresConnection) async throws -> Int64 {
        try await PostgresRows.one(connection.query(
            "UPDATE server_state SET last_cv = last_cv + 1 WHERE id = 1 RETURNING last_cv", logger: logger), as: Int64.self) ?? 0
    }

    /// The code a request identical to this one was refused with (`RefusedCCIDs`).
    private func refusedCode(_ pending: PendingChange, connection: PostgresConnection) async throws -> ChangeErrorCode? {
        let rows = try await PostgresRows.rows(connection.query("""
            SELECT fingerprint, code FROM refused_ccids
            WHERE bucket_id = \(pending.bucket.id) AND client_id = \(pending.clientID) AND ccid = \(pending.change.ccid)
            """, logger: logger))
        guard let row = rows.first else { return nil }
        let (fingerprint, code) = try row.decode((Data, Int).self)
        guard fingerprint == RefusedCCIDs.fingerprint(pending.change) else { return nil }
        return ChangeErrorCode(rawValue: code)
    }

    private func rememberRefusal(_ pending: PendingChange, code: ChangeErrorCode, connection: PostgresConnection) async throws {
        guard RefusedCCIDs.isRemembered(code) else { return }
        try await connection.query("""
            INSERT INTO refused_ccids (bucket_id, client_id, ccid, cv, fingerprint, code)
            VALUES (\(pending.bucket.id), \(pending.clientID), \(pending.change.ccid), (SELECT last_cv FROM server_state WHERE id = 1),
                    \(RefusedCCIDs.fingerprint(pending.change)), \(code.rawValue))
            ON CONFLICT (bucket_id, client_id, ccid) DO UPDATE SET cv = excluded.cv, fingerprint = excluded.fingerprint, code = excluded.code
            """, logger: logger)
    }
}

extension PostgresServerStore {
    /// Keeps the newest `keepingLast` changes of a bucket (as `ServerStore.compact`).
    @discardableResult
    static func compact(_ connection: PostgresConnection, bucketID: Int64, keepingLast: Int, logger: Logger) async throws -> Int {
        let cutoff = try await PostgresRows.one(connection.query(
            "SELECT cv FROM changes WHERE bucket_id = \(bucketID) ORDER BY cv DESC LIMIT 1 OFFSET \(keepingLast)", logger: logger), as: Int64.self)
        guard let cutoff else { return 0 }
        let dropped = try await PostgresRows.all(connection.query(
            "DELETE FROM changes WHERE bucket_id = \(bucketID) AND cv <= \(cutoff) RETURNING cv", logger: logger), as: Int64.self).count
        let previousBase = try await PostgresRows.one(connection.query(
            "SELECT base_cv FROM buckets WHERE id = \(bucketID)", logger: logger), as: Int64.self) ?? 0
        try await connection.query("DELETE FROM applied_ccids WHERE bucket_id = \(bucketID) AND cv <= \(previousBase)", logger: logger)
        try await connection.query("DELETE FROM refused_ccids WHERE bucket_id = \(bucketID) AND cv <= \(previousBase)", logger: logger)
        try await connection.query("""
            UPDATE buckets SET base_cv = \(cutoff), ccid_floor = \(previousBase),
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
