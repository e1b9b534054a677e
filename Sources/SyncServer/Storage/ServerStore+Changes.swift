import Foundation
import GRDB
import JSONDiff
import SQLiteStatements
import SyncProtocol

/// Bounds a change must respect.
struct ChangeLimits: Sendable, Hashable {
    var maxDocumentSize: Int
    var historyPerEntity: Int
    var changeLogRetention: Int
}

extension ServerStore {
    /// Applies one change inside the caller's transaction (entity, version history, change log
    /// and ccid; a refusal writes nothing, an error leaves the transaction to be rolled back;
    /// see `GroupCommit.swift`).
    /// - Returns: the stored change, or the error code to answer the sender with.
    static func applyInTransaction(
        _ db: Database, _ change: ChangeRequest, clientID: String, bucket: BucketHandle, limits: ChangeLimits,
        counters: inout ChangeCounters
    ) throws -> ChangeVerdict<StoredChange> {
        // Statements are cached: this runs for every change, many per group commit.
        let alreadyApplied = try Bool.fetchOne(
            db.cachedStatement(sql: "SELECT EXISTS (SELECT 1 FROM applied_ccids WHERE bucket_id = ? AND client_id = ? AND ccid = ?)")
                .bound(bucket.id, clientID, change.ccid)
        ) ?? false
        if alreadyApplied { return .refused(.duplicate) }
        if let remembered = try RefusedCCIDs.code(db, change, clientID: clientID, bucketID: bucket.id) {
            return .refused(remembered)
        }

        let current = try Row.fetchOne(
            db.cachedStatement(sql: "SELECT version, data FROM entities WHERE bucket_id = ? AND key = ?")
                .bound(bucket.id, change.id)
        ).map { row -> EntityState in
            let text: String? = row["data"]
            return EntityState(version: row["version"], data: try text.map { try decodeObject($0, what: "entity \(change.id)") })
        }
        let resolution = try ChangeResolver.resolve(change, current: current) { version in
            try String.fetchOne(
                db.cachedStatement(sql: "SELECT data FROM entity_versions WHERE bucket_id = ? AND key = ? AND version = ?")
                    .bound(bucket.id, change.id, version)
            ).map { try decodeObject($0, what: "entity \(change.id).\(version)") }
        }
        let resolved: ChangeResolution
        switch resolution {
        case .refused(let code): return .refused(code)
        case .accepted(let value): resolved = value
        }

        // Every refusal comes before the first write: a refused change leaves the transaction as
        // it found it, so a group commit needs no savepoint per change (GroupCommit.swift).
        let stored: StoredChange
        switch resolved {
        case .modify(let data, let diff, let sourceVersion, let endVersion):
            let dataText = JSONValue.object(data).compactRendered()
            if dataText.utf8.count > limits.maxDocumentSize { return .refused(.documentTooLarge) }
            guard SendableNesting.fits(data: data, diff: diff) else { return .refused(.invalidRequest) }
            let cv = counters.nextChangeVersion()
            try db.cachedStatement(sql: """
                INSERT INTO entities (bucket_id, key, version, data) VALUES (?, ?, ?, ?)
                ON CONFLICT (bucket_id, key) DO UPDATE SET version = excluded.version, data = excluded.data
                """).execute(binding: bucket.id, change.id, endVersion, dataText)
            try db.cachedStatement(sql: "INSERT OR REPLACE INTO entity_versions (bucket_id, key, version, data, accepted_at) VALUES (?, ?, ?, ?, ?)")
                .execute(binding: bucket.id, change.id, endVersion, dataText, Date().timeIntervalSince1970)
            if endVersion > limits.historyPerEntity {
                try db.cachedStatement(sql: "DELETE FROM entity_versions WHERE bucket_id = ? AND key = ? AND version <= ?")
                    .execute(binding: bucket.id, change.id, endVersion - limits.historyPerEntity)
            }
            stored = StoredChange(
                cv: cv, key: change.id, clientID: clientID, ccid: change.ccid, operation: .modify,
                diff: diff, sourceVersion: sourceVersion, endVersion: endVersion
            )
        case .remove(let sourceVersion, let endVersion):
            let cv = counters.nextChangeVersion()
            try db.cachedStatement(sql: "UPDATE entities SET version = ?, data = NULL WHERE bucket_id = ? AND key = ?")
                .execute(binding: endVersion, bucket.id, change.id)
            stored = StoredChange(
                cv: cv, key: change.id, clientID: clientID, ccid: change.ccid, operation: .remove,
                diff: nil, sourceVersion: sourceVersion, endVersion: endVersion
            )
        }
        try db.cachedStatement(sql: """
            INSERT INTO changes (cv, bucket_id, key, client_id, ccid, operation, diff, source_version, end_version)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
            """).execute(
            binding: stored.cv, bucket.id, stored.key, clientID, stored.ccid, stored.operation.rawValue,
            stored.diff.map { JSONDiffing.encode($0).compactRendered() }, stored.sourceVersion, stored.endVersion
        )
        try db.cachedStatement(sql: "INSERT INTO applied_ccids (bucket_id, client_id, ccid, cv) VALUES (?, ?, ?, ?)")
            .execute(binding: bucket.id, clientID, change.ccid, stored.cv)
        let count = try counters.countChange(db, bucketID: bucket.id)
        // Compact in batches (an eighth of the retention at a time), not on every change.
        if count > limits.changeLogRetention + max(1, limits.changeLogRetention / 8) {
            try counters.write(db)
            _ = try compact(db, bucketID: bucket.id, keepingLast: limits.changeLogRetention)
            counters.forgetCount(bucketID: bucket.id)
        }
        return .accepted(stored)
    }
}

/// The last change version and the change-log lengths of the buckets one write transaction
/// changes: read once, counted in memory, written once before the transaction commits
/// (`write`). An UPDATE ... RETURNING of each for every change was a fifth of the server's work
/// on a change. Whatever reads them in the transaction reads them here.
struct ChangeCounters {
    private(set) var lastChangeVersion: Int64
    private var wroteChangeVersion: Int64
    /// Bucket id → its log's length, for the buckets counted since their last write.
    private var changeCounts: [Int64: Int] = [:]
    private var unwrittenBuckets: Set<Int64> = []

    init(_ db: Database) throws {
        lastChangeVersion = try ServerStore.lastChangeVersion(db)
        wroteChangeVersion = lastChangeVersion
    }

    mutating func nextChangeVersion() -> Int64 {
        lastChangeVersion += 1
        return lastChangeVersion
    }

    /// Counts one more change in the bucket's log; returns the log's length with it.
    mutating func countChange(_ db: Database, bucketID: Int64) throws -> Int {
        let stored = try changeCounts[bucketID]
            ?? Int.fetchOne(db.cachedStatement(sql: "SELECT change_count FROM buckets WHERE id = ?").bound(bucketID))
            ?? 0
        changeCounts[bucketID] = stored + 1
        unwrittenBuckets.insert(bucketID)
        return stored + 1
    }

    /// After something recounted the bucket's log in the database (`compact`).
    mutating func forgetCount(bucketID: Int64) {
        changeCounts[bucketID] = nil
        unwrittenBuckets.remove(bucketID)
    }

    /// Stores what changed since the last write; the transaction must not commit without it.
    mutating func write(_ db: Database) throws {
        if lastChangeVersion != wroteChangeVersion {
            try db.cachedStatement(sql: "UPDATE server_state SET last_cv = ? WHERE id = 1").execute(binding: lastChangeVersion)
            wroteChangeVersion = lastChangeVersion
        }
        for bucketID in unwrittenBuckets {
            try db.cachedStatement(sql: "UPDATE buckets SET change_count = ? WHERE id = ?")
                .execute(binding: changeCounts[bucketID], bucketID)
        }
        unwrittenBuckets.removeAll()
    }
}
