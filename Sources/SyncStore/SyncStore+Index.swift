import Foundation
import GRDB
import JSONDiff
import SQLiteStatements

extension SyncStore {
    /// Starts loading the whole index (first sync, or after `cv:?`). Local pending changes are
    /// kept. After `cv:?` this store is a replica that checks the server against what it had
    /// acknowledged (`applyIndexPage`): the server may have been restored from a backup.
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
    /// A re-index after `cv:?` (the bucket had a cv) compares the server with what this store
    /// had acknowledged, as a replica, not a cache: an entity the server holds at an older version
    /// than ours, or at ours with other data (a restored backup that took other changes since),
    /// lost our changes, so our value is sent again over the server's version; an entity missing
    /// from the index is asked for at our version (`e:KEY.V`): if the server has that version, it
    /// removed the entity since, and so do we; if not, it lost it, and we create it again. On a
    /// first sync an entity not in the index is removed.
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
            let replica = bucketRow.cv != nil
            // Every entity of the bucket: those missing from the index are judged by their value too.
            for change in try parseFirst(keys: nil, bucket: bucketRow, db) { outcome.ready(change) }
            try Self.applyIndexEntries(entries, bucket: bucketRow, replica: replica, now: now, outcome: &outcome, db)
            if isLast {
                let unseen = try EntityRow.fetchAll(
                    db.cachedStatement(
                        sql: "SELECT * FROM entity WHERE bucket_id = ? AND seen_generation < ? AND ghost_version IS NOT NULL"),
                    arguments: [bucketRow.id, bucketRow.indexGeneration])
                for row in unseen {
                    if replica, !row.deletedPending, let version = row.ghostVersion, try !row.hasLocalEdit(db) {
                        // Removed on the server since our version, or lost by it: `e` tells (`load`).
                        var verifying = row
                        verifying.needsReload = true
                        verifying.reloadVersion = version
                        try verifying.update(db)
                        outcome.reloads.append(ReloadRequest(key: row.key, version: version))
                    } else {
                        try Self.removeFromServerSide(row, bucket: bucketRow, now: now, outcome: &outcome, db)
                        // A removal made here that the server no longer needs (it lost the
                        // note): still ours, for a later restore of a backup that holds the note.
                        if row.deletedPending, try EntityRow.find(bucketID: bucketRow.id, key: row.key, db) == nil {
                            try Self.markRemovedHere(key: row.key, bucket: bucketRow, db)
                        }
                    }
                }
                bucketRow.cv = bucketRow.indexCV ?? current ?? bucketRow.cv
                bucketRow.indexCV = nil
            }
            try bucketRow.update(db)
            try Self.recordServerLoss(outcome, bucket: bucketRow, now: now, db)
            return outcome
        }
        publish(outcome.events)
        return outcome
    }

    /// Counts what `outcome` sends again because the server lost it, into the bucket's
    /// `server_loss` for this re-index (a new re-index starts a new count).
    static func recordServerLoss(_ outcome: RemoteOutcome, bucket: BucketRow, now: Int64, _ db: Database) throws {
        guard !outcome.lostOnServer.isEmpty else { return }
        try db.cachedStatement(
            sql: """
                INSERT INTO server_loss (bucket_id, index_generation, detected_at, notes) VALUES (?, ?, ?, ?)
                ON CONFLICT (bucket_id) DO UPDATE SET
                    notes = CASE WHEN index_generation = excluded.index_generation THEN notes + excluded.notes ELSE excluded.notes END,
                    detected_at = CASE WHEN index_generation = excluded.index_generation THEN detected_at ELSE excluded.detected_at END,
                    index_generation = excluded.index_generation
                """
        ).execute(binding: bucket.id, bucket.indexGeneration, now, outcome.lostOnServer.count)
    }

    /// The last re-index of `bucket` that found the server had lost changes of this store.
    public func serverLoss(bucket: String) throws(StoreError) -> ServerLoss? {
        try read { db in
            let bucketRow = try BucketRow.named(bucket, db)
            return try Row.fetchOne(db, sql: "SELECT detected_at, notes FROM server_loss WHERE bucket_id = ?", arguments: [bucketRow.id])
                .map { ServerLoss(detectedAt: $0["detected_at"], notes: $0["notes"]) }
        }
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

    /// `replica`: a re-index after `cv:?`, which checks the server's versions against ours.
    static func applyIndexEntries(
        _ entries: [IndexEntry], bucket: BucketRow, replica: Bool = false, now: Int64, outcome: inout RemoteOutcome,
        _ db: Database
    ) throws {
        let known = try knownEntities(entries.map(\.key), bucketID: bucket.id, db)
        let removedHere = replica ? try removedSince(entries.filter { known[$0.key] == nil }, bucket: bucket, db) : []
        let fresh = entries.filter { $0.data != nil && known[$0.key] == nil && !removedHere.contains($0.key) }
        var nextID = fresh.isEmpty ? 0 : try Schema.allocateNodeIDs(db, count: fresh.count)
        let markSeen = try db.cachedStatement(sql: "UPDATE entity SET seen_generation = ? WHERE bucket_id = ? AND key = ?")
        let insert = try db.cachedStatement(
            sql: """
                INSERT INTO entity (id, bucket_id, key, ghost_version, ghost_data, local_value, local_is_ghost, file_size, mtime, ctime,
                    state, reason, deleted_pending, reload_version, needs_reload, seen_generation, node_id)
                VALUES (?, ?, ?, ?, ?, NULL, 1, ?, ?, ?, 'synced', NULL, 0, NULL, 0, ?, ?)
                """)
        let insertContent = try db.cachedStatement(sql: "INSERT INTO entity_content (entity_id, bytes) VALUES (?, ?)")
        var inserted = Set<String>()
        inserted.reserveCapacity(fresh.count)
        for entry in entries {
            if removedHere.contains(entry.key), let data = entry.data, inserted.insert(entry.key).inserted {
                try resendLostRemoval(key: entry.key, version: entry.version, data: data, bucket: bucket, now: now, outcome: &outcome, db)
                continue
            }
            if let data = entry.data, known[entry.key] == nil, inserted.insert(entry.key).inserted {
                // Equivalent to `load` for an unknown key: the ghost is the data, the file shows
                // it, nothing is owed (the local value is the ghost's compact text, kept once).
                let id = nextID
                nextID += 1
                let rendered = bucket.format.renderWithCompactJSON(data)
                let file = rendered.file.map { Data($0) }
                try insert.execute(arguments: [
                    id, bucket.id, entry.key, entry.version, rendered.compact, file?.count, now, now, bucket.indexGeneration, id,
                ])
                if let file { try insertContent.execute(arguments: [id, file]) }
                outcome.events.append(
                    RemoteEvent(bucket: bucket.name, key: entry.key, entityID: id, kind: .created, version: entry.version))
                continue
            }
            let current = known[entry.key]
            if replica, let data = entry.data, let ours = current?.version, ours >= entry.version,
                try resendIfServerLost(key: entry.key, version: entry.version, data: data, bucket: bucket, now: now, outcome: &outcome, db)
            {
                try markSeen.execute(binding: bucket.indexGeneration, bucket.id, entry.key)
                continue
            }
            if replica, let data = entry.data, let ours = current?.version, ours < entry.version,
                try checkHistory(key: entry.key, version: entry.version, data: data, ours: ours, bucket: bucket, outcome: &outcome, db)
            {
                try markSeen.execute(binding: bucket.indexGeneration, bucket.id, entry.key)
                continue
            }
            if replica, let data = entry.data, let current, current.version == nil,
                try resendRemovalUnderNewFile(key: entry.key, version: entry.version, data: data, bucket: bucket, outcome: &outcome, db)
            {
                try markSeen.execute(binding: bucket.indexGeneration, bucket.id, entry.key)
                continue
            }
            let upToDate = current.map { $0.version == entry.version && !$0.needsReload } ?? false
            if !upToDate && !inserted.contains(entry.key) {
                if let data = entry.data {
                    try load(key: entry.key, version: entry.version, data: data, bucket: bucket, now: now, outcome: &outcome, db)
                } else {
                    try markForReload(key: entry.key, version: entry.version, bucket: bucket, now: now, outcome: &outcome, db)
                }
            }
            try markSeen.execute(binding: bucket.indexGeneration, bucket.id, entry.key)
        }
    }

    /// The server holds `key` at `version` with `data`, where this store had a version at least
    /// as new acknowledged: if the server's is older, or the same with other data, the server
    /// lost our changes (a restored backup). Our value, edits included, is then sent again as a
    /// change over the server's version (the ghost becomes the server's data); a change of ours
    /// in flight was made over a version the server does not have, so it is replaced. The file
    /// stays as it is. True when that was the case.
    ///
    /// Only the mount whose change made the value the server lost (`EntityRow.authored`), or
    /// one with an edit of its own, sends it again: another replica takes the server's version
    /// meanwhile (and the author's value when it arrives). Were every copy sent again, a copy
    /// from a mount that was away would undo what others did since the restore (a removal, an
    /// edit made over the restored value): their changes have versions the old history used too.
    static func resendIfServerLost(
        key: String, version: Int, data: JSONObject, bucket: BucketRow, now: Int64, outcome: inout RemoteOutcome,
        _ db: Database
    ) throws -> Bool {
        guard var row = try EntityRow.find(bucketID: bucket.id, key: key, db), let ours = row.ghostVersion, ours >= version
        else { return false }
        let ghost = try row.ghost()
        if ours == version, ghost == data { return false }
        let open = try ChangeRow.open(entityID: row.id, db)
        guard try row.authored || row.deletedPending || row.hasLocalEdit(open: open) else {
            try adopt(data, version: version, oldGhost: ghost, remoteDiff: nil, row: &row, bucket: bucket, now: now, outcome: &outcome, db)
            return true
        }
        if let open { try open.delete(db) }
        // A removal made here goes to the version the server has, as an edit does.
        try sendAgain(
            &row, over: data, version: version, reason: "the server had lost changes to this note (restored from a backup?); sent again",
            bucket: bucket, outcome: &outcome, db)
        return true
    }

    /// Our value (or removal), which the server lost, goes to it again over what it holds:
    /// `ghost` at `version` (nil: nothing, so it is created anew). The file stays as it is.
    static func sendAgain(
        _ row: inout EntityRow, over ghost: JSONObject, version: Int?, reason: String, bucket: BucketRow,
        outcome: inout RemoteOutcome, _ db: Database
    ) throws {
        row.setGhost(ghost, version: version)
        row.needsReload = false
        row.reloadVersion = nil
        // The value is owed again, as a save's is: a removal the server answers it with does
        // not take it (`EntityRow.editSeq`).
        row.editSeq += 1
        let ready = try reconcileQueue(&row, bucket: bucket.name, db)
        if ready != nil && row.state != EntityState.invalid.description { row.reason = reason }
        try row.update(db)
        if let ready { outcome.ready(ready) }
        outcome.lostOnServer.append(row.key)
    }

    /// The server lists an entity whose value is ours at a newer version with other data: newer
    /// in our history (someone changed it since), or the version of another history (the server
    /// restored from a backup taken before an earlier restore, whose versions ours reuse)? Our
    /// version is asked for (`e:KEY.V`), the listed one kept meanwhile (`listed_version`), and
    /// `load` decides. True when that was the case.
    static func checkHistory(
        key: String, version: Int, data: JSONObject, ours: Int, bucket: BucketRow, outcome: inout RemoteOutcome, _ db: Database
    ) throws -> Bool {
        guard var row = try EntityRow.find(bucketID: bucket.id, key: key, db), row.authored, !row.deletedPending,
            row.ghostVersion == ours, try !row.hasLocalEdit(db), try row.ghost() != data
        else { return false }
        try db.cachedStatement(sql: "INSERT OR REPLACE INTO listed_version (entity_id, version, data) VALUES (?, ?, ?)")
            .execute(binding: row.id, version, StoredJSON.text(data))
        row.needsReload = true
        row.reloadVersion = ours
        try row.update(db)
        outcome.reloads.append(ReloadRequest(key: key, version: ours))
        return true
    }

    /// Of index entries this store holds no row for, those it removed (or saw removed) at or
    /// after the version the server lists: a server that lists them lost their removal.
    /// (Versions go on after a removal, so an entity created again since has a newer version
    /// and is taken as any other.) The version compared is the highest this store ever knew of
    /// the entity (`entity_highest_version`), not only the last (`removed_entity`): a restore
    /// numbers versions on from its backup's, and a later restore of a backup from before the
    /// first lists versions of the history this store knew before, which its removal followed.
    /// Only removals made here: one seen from elsewhere is its author's to send again.
    private static func removedSince(_ entries: [IndexEntry], bucket: BucketRow, _ db: Database) throws -> Set<String> {
        let lookup = try db.cachedStatement(
            sql: """
                SELECT max(removed.last_version, coalesce(highest.version, 0)) FROM removed_entity AS removed
                LEFT JOIN entity_highest_version AS highest ON highest.bucket = removed.bucket AND highest.key = removed.key
                WHERE removed.bucket = ? AND removed.key = ? AND removed.removed_here = 1
                """)
        var removed = Set<String>()
        for entry in entries {
            if let last = try Int.fetchOne(lookup, arguments: [bucket.name, entry.key]), entry.version <= last {
                removed.insert(entry.key)
            }
        }
        return removed
    }

    /// The server lists a note this store removed (`removedSince`), where a file made here
    /// since under its key has not reached the server (its bytes not JSON, or not sent yet): the
    /// removal is sent again over the listed version, and the new file stays, to be created on
    /// the server once the removal is acknowledged (`acknowledge`). Taking the listed note under
    /// the new file would bring back, on every other device, the note that was removed. True
    /// when that was the case.
    private static func resendRemovalUnderNewFile(
        key: String, version: Int, data: JSONObject, bucket: BucketRow, outcome: inout RemoteOutcome, _ db: Database
    ) throws -> Bool {
        guard try !removedSince([IndexEntry(key: key, version: version, data: nil)], bucket: bucket, db).isEmpty,
            var row = try EntityRow.find(bucketID: bucket.id, key: key, db), row.ghostVersion == nil, !row.deletedPending,
            row.hasFile
        else { return false }
        let open = try ChangeRow.open(entityID: row.id, db)
        // A create in flight reaches the server first, over the listed note: that decides.
        guard open.map({ $0.state == "queued" }) ?? true else { return false }
        if let open { try open.delete(db) }
        row.setGhost(data, version: version)
        row.reason = "the server had lost this note's removal (restored from a backup?); removed again before this file is sent"
        if row.state != EntityState.invalid.description { row.state = EntityState.pending.description }
        try row.update(db)
        var removal = ChangeRow(
            seq: nil, entityID: row.id, ccid: newCCID(), sv: version, op: "-", diff: nil, fullData: nil, state: "queued",
            created: now())
        try removal.save(db)
        outcome.ready(try removal.outgoing(bucket: bucket.name, key: key))
        outcome.lostOnServer.append(key)
        return true
    }

    /// A removal the server lost (a restored backup lists the entity again): the entity is
    /// stored as removed here, over the server's version, and the removal sent again. No file
    /// shows meanwhile.
    private static func resendLostRemoval(
        key: String, version: Int, data: JSONObject, bucket: BucketRow, now: Int64, outcome: inout RemoteOutcome, _ db: Database
    ) throws {
        var row = try EntityRow.new(bucketID: bucket.id, key: key, now: now, db)
        row.setGhost(data, version: version)
        row.deletedPending = true
        row.seenGeneration = bucket.indexGeneration
        row.reason = "the server had lost this note's removal (restored from a backup?); removed again"
        try row.insert(db)
        if let removal = try reconcileQueue(&row, bucket: bucket.name, db) { outcome.ready(removal) }
        try row.update(db)
        outcome.lostOnServer.append(key)
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
