import Foundation
import GRDB
import JSONDiff
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
        _ db: Database, _ change: ChangeRequest, clientID: String, bucket: BucketHandle, limits: ChangeLimits
    ) throws -> ChangeVerdict<StoredChange> {
        // Statements are cached: this runs for every change, many per group commit.
        let alreadyApplied = try Bool.fetchOne(
            db.cachedStatement(sql: "SELECT EXISTS (SELECT 1 FROM applied_ccids WHERE bucket_id = ? AND client_id = ? AND ccid = ?)"),
            arguments: [bucket.id, clientID, change.ccid]
        ) ?? false
        if alreadyApplied { return .refused(.duplicate) }
        if let remembered = try RefusedCCIDs.code(db, change, clientID: clientID, bucketID: bucket.id) {
            return .refused(remembered)
        }

        let current = try Row.fetchOne(
            db.cachedStatement(sql: "SELECT version, data FROM entities WHERE bucket_id = ? AND key = ?"),
            arguments: [bucket.id, change.id]
        ).map { row -> EntityState in
            let text: String? = row["data"]
            return EntityState(version: row["version"], data: try text.map { try decodeObject($0, what: "entity \(change.id)") })
        }
        let resolution = try ChangeResolver.resolve(change, current: current) { version in
            try String.fetchOne(
                db.cachedStatement(sql: "SELECT data FROM entity_versions WHERE bucket_id = ? AND key = ? AND version = ?"),
                arguments: [bucket.id, change.id, version]
            ).map { try decodeObject($0, what: "entity \(change.id).\(version)") }
        }
        let resolved: ChangeResolution
        switch resolution {
        case .refused(let code): return .refused(code)
        case .accepted(let value): resolved = value
        }

        // Every refusal comes before the first write: a refused change leaves the transaction as
        // it found it, so a group commit needs no savepoint per change (GroupCommit.swift).
        func nextChangeVersion() throws -> Int64 {
            try Int64.fetchOne(
                db.cachedStatement(sql: "UPDATE server_state SET last_cv = last_cv + 1 WHERE id = 1 RETURNING last_cv")
            ) ?? 0
        }
        let stored: StoredChange
        switch resolved {
        case .modify(let data, let diff, let sourceVersion, let endVersion):
            let dataText = JSONValue.object(data).compactRendered()
            if dataText.utf8.count > limits.maxDocumentSize { return .refused(.documentTooLarge) }
            guard SendableNesting.fits(data: data, diff: diff) else { return .refused(.invalidRequest) }
            let cv = try nextChangeVersion()
            try db.cachedStatement(sql: """
                INSERT INTO entities (bucket_id, key, version, data) VALUES (?, ?, ?, ?)
                ON CONFLICT (bucket_id, key) DO UPDATE SET version = excluded.version, data = excluded.data
                """).execute(arguments: [bucket.id, change.id, endVersion, dataText])
            try db.cachedStatement(sql: "INSERT OR REPLACE INTO entity_versions (bucket_id, key, version, data, accepted_at) VALUES (?, ?, ?, ?, ?)")
                .execute(arguments: [bucket.id, change.id, endVersion, dataText, Date().timeIntervalSince1970])
            if endVersion > limits.historyPerEntity {
                try db.cachedStatement(sql: "DELETE FROM entity_versions WHERE bucket_id = ? AND key = ? AND version <= ?")
                    .execute(arguments: [bucket.id, change.id, endVersion - limits.historyPerEntity])
            }
            stored = StoredChange(
                cv: cv, key: change.id, clientID: clientID, ccid: change.ccid, operation: .modify,
                diff: diff, sourceVersion: sourceVersion, endVersion: endVersion
            )
        case .remove(let sourceVersion, let endVersion):
            let cv = try nextChangeVersion()
            try db.cachedStatement(sql: "UPDATE entities SET version = ?, data = NULL WHERE bucket_id = ? AND key = ?")
                .execute(arguments: [endVersion, bucket.id, change.id])
            stored = StoredChange(
                cv: cv, key: change.id, clientID: clientID, ccid: change.ccid, operation: .remove,
                diff: nil, sourceVersion: sourceVersion, endVersion: endVersion
            )
        }
        try db.cachedStatement(sql: """
            INSERT INTO changes (cv, bucket_id, key, client_id, ccid, operation, diff, source_version, end_version)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
            """).execute(arguments: [
            stored.cv, bucket.id, stored.key, clientID, stored.ccid, stored.operation.rawValue,
            stored.diff.map { JSONDiffing.encode($0).compactRendered() }, stored.sourceVersion, stored.endVersion,
        ])
        try db.cachedStatement(sql: "INSERT INTO applied_ccids (bucket_id, client_id, ccid, cv) VALUES (?, ?, ?, ?)")
            .execute(arguments: [bucket.id, clientID, change.ccid, stored.cv])
        let count = try Int.fetchOne(
            db.cachedStatement(sql: "UPDATE buckets SET change_count = change_count + 1 WHERE id = ? RETURNING change_count"),
            arguments: [bucket.id]
        ) ?? 0
        // Compact in batches (an eighth of the retention at a time), not on every change.
        if count > limits.changeLogRetention + max(1, limits.changeLogRetention / 8) {
            _ = try compact(db, bucketID: bucket.id, keepingLast: limits.changeLogRetention)
        }
        return .accepted(stored)
    }
}
