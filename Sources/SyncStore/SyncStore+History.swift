import Foundation
import GRDB
import JSONDiff

/// One version of an entity as the server keeps it (the answer to `e:key.version`).
public struct EntityVersion: Sendable, Hashable {
    public let version: Int
    /// nil: the server keeps no such version (dropped from its history, or a deletion).
    public let data: JSONObject?
    /// When the server accepted it; nil when the server does not say (only bucketfs's does).
    public let acceptedAt: Date?

    public init(version: Int, data: JSONObject?, acceptedAt: Date?) {
        self.version = version
        self.data = data
        self.acceptedAt = acceptedAt
    }
}

extension SyncStore {
    /// Versions of an entity fetched from the server so far, oldest first.
    public func cachedVersions(bucket: String, key: String) throws(StoreError) -> [EntityVersion] {
        try read { db in
            try Row.fetchAll(
                db,
                sql: "SELECT version, data, accepted_at FROM entity_history WHERE bucket = ? AND key = ? ORDER BY version",
                arguments: [bucket, key]
            ).map { row in
                let seconds: Double? = row["accepted_at"]
                return EntityVersion(
                    version: row["version"], data: try StoredJSON.object(row["data"], column: "entity_history.data"),
                    acceptedAt: seconds.map(Date.init(timeIntervalSince1970:)))
            }
        }
    }

    /// Keeps fetched versions for listing offline (versions the server did not have are skipped).
    public func cacheVersions(bucket: String, key: String, _ versions: [EntityVersion]) throws(StoreError) {
        let kept = versions.filter { $0.data != nil }
        guard !kept.isEmpty else { return }
        // Deferred: a power loss only means fetching them again.
        try write(.deferred) { db in
            for version in kept {
                guard let data = version.data else { continue }
                try db.execute(
                    sql: "INSERT OR REPLACE INTO entity_history (bucket, key, version, data, accepted_at) VALUES (?, ?, ?, ?, ?)",
                    arguments: [bucket, key, version.version, StoredJSON.text(data), version.acceptedAt?.timeIntervalSince1970])
            }
        }
    }

    /// The last server version of an entity this store knew before forgetting it (deleted here
    /// or on the server); nil if it never had one.
    public func lastVersionBeforeRemoval(bucket: String, key: String) throws(StoreError) -> Int? {
        try read { db in
            try Int.fetchOne(
                db, sql: "SELECT last_version FROM removed_entity WHERE bucket = ? AND key = ?", arguments: [bucket, key])
        }
    }
}

extension SyncStore {
    /// One fetched version of an entity; nil when it was not fetched (or the server kept none).
    public func cachedVersion(bucket: String, key: String, version: Int) throws(StoreError) -> EntityVersion? {
        try read { db in
            guard
                let row = try Row.fetchOne(
                    db, sql: "SELECT data, accepted_at FROM entity_history WHERE bucket = ? AND key = ? AND version = ?",
                    arguments: [bucket, key, version])
            else { return nil }
            let seconds: Double? = row["accepted_at"]
            return EntityVersion(
                version: version, data: try StoredJSON.object(row["data"], column: "entity_history.data"),
                acceptedAt: seconds.map(Date.init(timeIntervalSince1970:)))
        }
    }

    /// Keys of a bucket's entities that have server versions: those in the store that reached
    /// the server, and those it forgot (deleted) whose last version it remembers; sorted.
    public func keysWithHistory(bucket: String) throws(StoreError) -> [String] {
        try read { db in
            try String.fetchAll(
                db,
                sql: """
                    SELECT entity.key FROM entity JOIN bucket ON bucket.id = entity.bucket_id
                    WHERE bucket.name = ? AND entity.ghost_version IS NOT NULL
                    UNION SELECT key FROM removed_entity WHERE bucket = ?
                    ORDER BY 1
                    """,
                arguments: [bucket, bucket])
        }
    }
}
