import Foundation
import GRDB
import JSONDiff

/// A node of the mount found by its stable id.
public enum StoreNode: Hashable, Sendable {
    case bucket(BucketInfo)
    case entity(EntityInfo)
    case localFile(LocalFileInfo)
}

extension SyncStore {
    /// Adds the bucket if it is new (mkdir at the mount root); returns it either way.
    public func ensureBucket(_ name: String) throws(StoreError) -> BucketInfo {
        try write { db in
            if let row = try BucketRow.filter(Column("name") == name).fetchOne(db) { return row.info }
            let row = BucketRow(
                id: try Schema.allocateNodeID(db), name: name, cv: nil, indexCV: nil, indexGeneration: 0,
                ctime: Self.now())
            try row.insert(db)
            return row.info
        }
    }

    /// All buckets, by name.
    public func buckets() throws(StoreError) -> [BucketInfo] {
        try read { db in try BucketRow.order(Column("name")).fetchAll(db).map(\.info) }
    }

    /// The bucket with this name, if known.
    public func bucket(named name: String) throws(StoreError) -> BucketInfo? {
        try read { db in try BucketRow.filter(Column("name") == name).fetchOne(db)?.info }
    }

    /// The bucket's directory: entities that have a file, and local-only files.
    public func entries(bucket: String) throws(StoreError) -> [DirectoryEntry] {
        var result: [DirectoryEntry] = []
        try forEachEntry(bucket: bucket) { result.append($0) }
        return result
    }

    /// `entries`, one at a time, in a read transaction: a caller that keeps something else of
    /// each (a mount's node) never holds them all. A mount listing 1,000,000 notes that took
    /// them all first freed their keys only once it had made every node, and the heap kept
    /// those holes: small blocks allocated later landed in them, and ~60 MB stayed in use after
    /// the listing left memory (issue 40).
    public func forEachEntry(bucket: String, _ body: (DirectoryEntry) -> Void) throws(StoreError) {
        try read { db in
            let bucketRow = try BucketRow.named(bucket, db)
            // A cursor, not fetchAll: fetchAll made a Row object per entity and kept them all
            // until the last, each beside the key kept from it, and the heap stayed riddled with
            // their holes (a bucket of 1,000,000 notes left ~220 MB free but in use; issue 40).
            let entities = try Row.fetchCursor(
                db,
                sql: """
                    SELECT COALESCE(node_id, id) AS id, key, file_size AS size, mtime, ctime, mode, atime FROM entity
                    WHERE bucket_id = ? AND file_size IS NOT NULL ORDER BY key
                    """,
                arguments: [bucketRow.id])
            while let row = try entities.next() {
                body(
                    DirectoryEntry(
                        id: row["id"], name: .entity(key: row["key"]), size: row["size"], mtime: row["mtime"],
                        ctime: row["ctime"], mode: row["mode"], atime: row["atime"]))
            }
            let files = try Row.fetchCursor(
                db,
                sql: "SELECT id, name, COALESCE(size, length(content)) AS size, mtime, ctime, mode, atime FROM local_file WHERE bucket_id = ? ORDER BY name",
                arguments: [bucketRow.id])
            while let row = try files.next() {
                body(
                    DirectoryEntry(
                        id: row["id"], name: .localFile(name: row["name"]), size: row["size"], mtime: row["mtime"],
                        ctime: row["ctime"], mode: row["mode"], atime: row["atime"]))
            }
        }
    }

    /// The directory entry for one name, if it exists (lookup).
    public func lookup(bucket: String, name: EntryName) throws(StoreError) -> DirectoryEntry? {
        try read { db in try Self.lookup(bucket: bucket, name: name, db) }
    }

    static func lookup(bucket: String, name: EntryName, _ db: Database) throws -> DirectoryEntry? {
        let bucketRow = try BucketRow.named(bucket, db)
        switch name {
        case .entity(let key):
            guard let row = try EntityRow.find(bucketID: bucketRow.id, key: key, db), let size = row.fileSize else {
                return nil
            }
            return DirectoryEntry(
                id: row.nodeID, name: name, size: size, mtime: row.mtime, ctime: row.ctime, mode: row.mode, atime: row.atime)
        case .localFile(let fileName):
            return try LocalFileRow.find(bucketID: bucketRow.id, name: fileName, db)?.directoryEntry
        }
    }

    /// Everything the store holds about an entity (also deleted-pending ones); nil if unknown.
    public func entity(bucket: String, key: String) throws(StoreError) -> EntityInfo? {
        try read { db in
            let bucketRow = try BucketRow.named(bucket, db)
            return try EntityRow.find(bucketID: bucketRow.id, key: key, db)?.info(bucket: bucket, db)
        }
    }

    /// An entity's version and sync state, neither its value nor its bytes: what a file's
    /// `user.bucketfs.state` asks, as often as a script polls it, of notes of any size (the
    /// whole row read and its two values parsed took a 16 MiB note's three copies per question).
    /// Nil if unknown or removed here.
    public func syncState(bucket: String, key: String) throws(StoreError) -> (version: Int?, state: EntityState)? {
        try readOneStatement { db in
            let statement = try db.cachedStatement(sql: """
                SELECT entity.ghost_version, entity.state, entity.unparsed FROM entity JOIN bucket ON bucket.id = entity.bucket_id
                WHERE bucket.name = ? AND entity.key = ? AND entity.deleted_pending = 0
                """)
            return try Row.fetchOne(statement, arguments: [bucket, key]).map { row in
                (version: row[0], state: EntityRow.state(text: row[1], unparsed: row[2]))
            }
        }
    }

    /// The bytes the entity's file shows; nil if it has no file.
    public func readEntity(bucket: String, key: String) throws(StoreError) -> [UInt8]? {
        // One statement for a file of ordinary size; a large one's bytes by pieces, in a
        // transaction (`IncrementalBlob`).
        let small = try readOneStatement { db -> [UInt8]?? in
            let statement = try db.cachedStatement(sql: """
                SELECT CASE WHEN entity.file_size < \(IncrementalBlob.threshold) THEN entity_content.bytes END
                FROM entity JOIN bucket ON bucket.id = entity.bucket_id
                JOIN entity_content ON entity_content.entity_id = entity.id
                WHERE bucket.name = ? AND entity.key = ? AND entity.file_size IS NOT NULL
                """)
            // Copied once, from SQLite's buffer into the array.
            let rows = try Row.fetchCursor(statement, arguments: [bucket, key])
            guard let row = try rows.next() else { return .some(nil) }
            let bytes: [UInt8]?? = row.hasNull(atIndex: 0) ? nil : .some(try row.withUnsafeData(atIndex: 0) { $0.map { [UInt8]($0) } ?? [] })
            while try rows.next() != nil {}  // stepped to its end: the statement holds nothing open
            return bytes
        }
        if let small { return small }
        return try read { db in
            let statement = try db.cachedStatement(sql: """
                SELECT entity.id, entity.file_size FROM entity JOIN bucket ON bucket.id = entity.bucket_id
                WHERE bucket.name = ? AND entity.key = ? AND entity.file_size IS NOT NULL
                """)
            guard let row = try Row.fetchOne(statement, arguments: [bucket, key]) else { return nil }
            return try EntityRow.storedContent(entityID: row[0], size: row[1], db)
        }
    }

    /// A local-only file, if it exists.
    public func localFile(bucket: String, name: String) throws(StoreError) -> LocalFileInfo? {
        try read { db in
            let bucketRow = try BucketRow.named(bucket, db)
            return try LocalFileRow.find(bucketID: bucketRow.id, name: name, db)?.info(bucket: bucket, db)
        }
    }

    /// The node with this stable id (inode number), if it still exists.
    public func node(id: Int64) throws(StoreError) -> StoreNode? {
        try read { db in
            if let bucket = try BucketRow.fetchOne(db, key: id) { return .bucket(bucket.info) }
            if let entity = try EntityRow.fetchOne(db, key: id) {
                guard let bucket = try BucketRow.fetchOne(db, key: entity.bucketID) else { return nil }
                return .entity(try entity.info(bucket: bucket.name, db))
            }
            if let file = try LocalFileRow.fetchOne(db, key: id) {
                guard let bucket = try BucketRow.fetchOne(db, key: file.bucketID) else { return nil }
                return .localFile(try file.info(bucket: bucket.name, db))
            }
            return nil
        }
    }

    /// Entities whose state is not `synced` (for `bucketfs status`).
    public func unsyncedEntities() throws(StoreError) -> [EntityInfo] {
        try read { db in
            let buckets = Dictionary(uniqueKeysWithValues: try BucketRow.fetchAll(db).map { ($0.id, $0.name) })
            return try EntityRow.filter(Column("state") != "synced" || Column("deleted_pending") == true || Column("unparsed") != 0)
                .order(Column("id")).fetchAll(db)
                .map { row in try row.info(bucket: buckets[row.bucketID] ?? "", db) }
        }
    }

    /// Counts by kind and state.
    public func stats() throws(StoreError) -> StoreStats {
        try read { db in
            var stats = StoreStats()
            stats.buckets = try BucketRow.fetchCount(db)
            stats.entities = try EntityRow.filter(Column("file_size") != nil).fetchCount(db)
            stats.localFiles = try LocalFileRow.fetchCount(db)
            for row in try Row.fetchAll(db, sql: "SELECT state, count(*) AS n FROM entity WHERE file_size IS NOT NULL GROUP BY state") {
                stats.byState[row["state"]] = row["n"]
            }
            for row in try Row.fetchAll(db, sql: "SELECT state, count(*) AS n FROM pending_change GROUP BY state") {
                let state: String = row["state"]
                let count: Int = row["n"]
                switch state {
                case "queued": stats.queuedChanges += count
                case "sent": stats.sentChanges += count
                default: stats.rejectedChanges += count
                }
            }
            // A local change held back until a reload brings the server's version
            // (`reconcileQueue`: the reload recomputes it) is owed to the server all the same.
            stats.changesAwaitingReload = try Int.fetchOne(
                db,
                sql: """
                    SELECT count(*) FROM entity WHERE needs_reload = 1 AND (deleted_pending = 1 OR state IN ('pending', 'conflict'))
                    AND NOT EXISTS (SELECT 1 FROM pending_change c WHERE c.entity_id = entity.id AND c.state IN ('queued', 'sent'))
                    """) ?? 0
            stats.savesParsedLater = try Int.fetchOne(db, sql: "SELECT count(*) FROM entity WHERE unparsed != 0") ?? 0
            return stats
        }
    }

    /// The answer to a server `index` request: what this client holds and what it owes.
    public func localIndex(bucket: String) throws(StoreError) -> IndexSnapshot {
        try read { db in
            let bucketRow = try BucketRow.named(bucket, db)
            let items = try EntityRow
                .filter(Column("bucket_id") == bucketRow.id && Column("ghost_version") != nil)
                .order(Column("key")).fetchAll(db)
                .compactMap { row in row.ghostVersion.map { IndexSnapshot.Item(key: row.key, version: $0) } }
            let pending = try Row.fetchAll(
                db,
                sql: """
                    SELECT e.key AS key, c.sv AS sv, c.ccid AS ccid FROM pending_change c
                    CROSS JOIN entity e ON e.id = c.entity_id
                    WHERE e.bucket_id = ? AND c.state IN ('queued', 'sent') ORDER BY c.seq
                    """,
                arguments: [bucketRow.id]
            ).map { row in IndexSnapshot.Pending(key: row["key"], sourceVersion: row["sv"], ccid: row["ccid"]) }
            return IndexSnapshot(cv: bucketRow.cv, index: items, pending: pending)
        }
    }

    /// Every change still owed to the server for this bucket, oldest first (sent ones are resent
    /// with their ccid after a reconnect or restart).
    public func outgoingChanges(bucket: String) throws(StoreError) -> [OutgoingChange] {
        try read { db in
            let bucketRow = try BucketRow.named(bucket, db)
            return try Self.owed(bucket: bucketRow, db)
        }
    }

    /// The oldest `limit` changes of the bucket never sent (`outgoingChanges` without those in
    /// flight): what an engine sends as acknowledgements make room on its connection.
    public func queuedChanges(bucket: String, limit: Int) throws(StoreError) -> [OutgoingChange] {
        try read { db in
            let bucketRow = try BucketRow.named(bucket, db)
            return try Self.owed(bucket: bucketRow, queuedOnly: true, limit: max(limit, 0), db)
        }
    }

    /// Entities waiting for an `e` fetch (missing data, version mismatch), persisted so a restart asks again.
    public func pendingReloads(bucket: String) throws(StoreError) -> [ReloadRequest] {
        try read { db in
            let bucketRow = try BucketRow.named(bucket, db)
            return try EntityRow.filter(Column("bucket_id") == bucketRow.id && Column("needs_reload") == true)
                .order(Column("key")).fetchAll(db)
                .map { ReloadRequest(key: $0.key, version: $0.reloadVersion) }
        }
    }
}
