import Foundation
import GRDB
import JSONDiff

extension SyncStore {
    /// Starts loading the whole index (first sync, or after `cv:?`): entities not seen by the
    /// end are treated as removed on the server. Local pending changes are kept.
    public func beginIndex(bucket: String) throws(StoreError) {
        try write(.deferred) { db in
            var bucketRow = try BucketRow.named(bucket, db)
            bucketRow.indexGeneration += 1
            bucketRow.indexCV = nil
            try bucketRow.update(db)
        }
    }

    /// Applies one `i` page. With data the entities are stored at once, without it they are
    /// marked for `e`. `isLast` (no `mark`) promotes the index's `current` to the bucket's cv.
    ///
    /// One transaction per page. A first sync is mostly keys this store has never seen: those
    /// are inserted directly (one lookup for the whole page, a block of node ids, one cached
    /// insert each, each value rendered once per format); known keys at the same version are
    /// only marked seen; everything else takes the general path (rebase over local edits).
    public func applyIndexPage(bucket: String, entries: [IndexEntry], current: String?, isLast: Bool) throws(StoreError) -> RemoteOutcome {
        takeLocalEditsFirst(bucket: bucket, keys: Set(entries.map(\.key)))
        // Deferred: an index dropped by a power loss is loaded again (the cv is in the same write).
        let outcome = try write(.deferred) { db in
            var bucketRow = try BucketRow.named(bucket, db)
            var outcome = RemoteOutcome()
            let now = Self.now()
            if bucketRow.indexCV == nil, let current {
                bucketRow.indexCV = current
            }
            try Self.applyIndexEntries(entries, bucket: bucketRow, now: now, outcome: &outcome, db)
            if isLast {
                let unseen = try EntityRow.fetchAll(
                    db.cachedStatement(
                        sql: "SELECT * FROM entity WHERE bucket_id = ? AND seen_generation < ? AND ghost_version IS NOT NULL"),
                    arguments: [bucketRow.id, bucketRow.indexGeneration])
                for row in unseen {
                    try Self.removeFromServerSide(row, bucket: bucketRow, now: now, outcome: &outcome, db)
                }
                bucketRow.cv = bucketRow.indexCV ?? current ?? bucketRow.cv
                bucketRow.indexCV = nil
            }
            try bucketRow.update(db)
            return outcome
        }
        publish(outcome.events)
        return outcome
    }

    /// Whether the bucket has a complete index (so a reconnect sends `cv:` instead of `i`).
    public func hasIndex(bucket: String) throws(StoreError) -> Bool {
        try read { db in try BucketRow.named(bucket, db).cv != nil }
    }

    // MARK: - Transaction bodies

    /// What the store holds of a key, as far as an index page needs to know.
    private struct KnownEntity {
        let version: Int?
        let needsReload: Bool
    }

    static func applyIndexEntries(
        _ entries: [IndexEntry], bucket: BucketRow, now: Int64, outcome: inout RemoteOutcome, _ db: Database
    ) throws {
        let known = try knownEntities(entries.map(\.key), bucketID: bucket.id, db)
        let fresh = entries.filter { $0.data != nil && known[$0.key] == nil }
        var nextID = fresh.isEmpty ? 0 : try Schema.allocateNodeIDs(db, count: fresh.count)
        let markSeen = try db.cachedStatement(sql: "UPDATE entity SET seen_generation = ? WHERE bucket_id = ? AND key = ?")
        let insert = try db.cachedStatement(
            sql: """
                INSERT INTO entity (id, bucket_id, key, ghost_version, ghost_data, local_value, content, mtime, ctime,
                    state, reason, deleted_pending, reload_version, needs_reload, seen_generation, node_id)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'synced', NULL, 0, NULL, 0, ?, ?)
                """)
        var inserted = Set<String>()
        inserted.reserveCapacity(fresh.count)
        for entry in entries {
            if let data = entry.data, known[entry.key] == nil, inserted.insert(entry.key).inserted {
                // Equivalent to `load` for an unknown key: the ghost is the data, the file shows
                // it, nothing is owed (ghost and local value are the same compact text).
                let id = nextID
                nextID += 1
                let rendered = bucket.format.renderWithCompactJSON(data)
                try insert.execute(arguments: [
                    id, bucket.id, entry.key, entry.version, rendered.compact, rendered.compact, rendered.file.map { Data($0) }, now, now,
                    bucket.indexGeneration, id,
                ])
                outcome.events.append(
                    RemoteEvent(bucket: bucket.name, key: entry.key, entityID: id, kind: .created, version: entry.version))
                continue
            }
            let current = known[entry.key]
            let upToDate = current.map { $0.version == entry.version && !$0.needsReload } ?? false
            if !upToDate && !inserted.contains(entry.key) {
                if let data = entry.data {
                    try load(key: entry.key, version: entry.version, data: data, bucket: bucket, now: now, outcome: &outcome, db)
                } else {
                    try markForReload(key: entry.key, version: entry.version, bucket: bucket, now: now, outcome: &outcome, db)
                }
            }
            try markSeen.execute(arguments: [bucket.indexGeneration, bucket.id, entry.key])
        }
    }

    /// The page's keys this store already holds, in one query per chunk (not one per entry).
    private static func knownEntities(_ keys: [String], bucketID: Int64, _ db: Database) throws -> [String: KnownEntity] {
        var known: [String: KnownEntity] = [:]
        // Well under SQLite's bound-parameter limit (32766 since 3.32, 999 before).
        let chunkSize = 900
        var start = keys.startIndex
        while start < keys.endIndex {
            let chunk = keys[start..<min(start + chunkSize, keys.endIndex)]
            start = chunk.endIndex
            let placeholders = Array(repeating: "?", count: chunk.count).joined(separator: ",")
            var arguments: StatementArguments = [bucketID]
            arguments += StatementArguments(chunk)
            let rows = try Row.fetchCursor(
                db,
                sql: "SELECT key, ghost_version, needs_reload FROM entity WHERE bucket_id = ? AND key IN (\(placeholders))",
                arguments: arguments)
            while let row = try rows.next() {
                known[row["key"]] = KnownEntity(version: row["ghost_version"], needsReload: row["needs_reload"])
            }
        }
        return known
    }
}
