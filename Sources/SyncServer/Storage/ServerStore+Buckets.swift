import GRDB
import JSONDiff
import SyncProtocol

extension ServerStore {
    /// The bucket `name` of a user, created on first use with the current cv as its base.
    func openBucket(userID: Int64, name: String) async throws -> BucketHandle {
        guard BucketName.isValid(name) else { throw SyncServerError.invalidBucketName(name) }
        return try await pool.write { db in
            if let id = try Int64.fetchOne(db, sql: "SELECT id FROM buckets WHERE user_id = ? AND name = ?", arguments: [userID, name]) {
                return BucketHandle(id: id, userID: userID, name: name)
            }
            let lastCV = try Self.lastChangeVersion(db)
            try db.execute(
                sql: "INSERT INTO buckets (user_id, name, base_cv, ccid_floor) VALUES (?, ?, ?, ?)",
                arguments: [userID, name, lastCV, lastCV]
            )
            return BucketHandle(id: db.lastInsertedRowID, userID: userID, name: name)
        }
    }

    /// Reads one index page and hands it to `deliver` in line with broadcasts: after those of
    /// every change the page includes, before any of a change committed after its `current`.
    /// - Parameter maxDataBytes: a page with data ends early (with a mark) once its entities
    ///   reach this many bytes, so one page never outgrows the connection's outbound buffer.
    func readIndexPage(
        bucket: BucketHandle, afterKey: String?, offset: Int, limit: Int, includeData: Bool, maxDataBytes: Int,
        deliver: @escaping @Sendable (IndexPage) -> Void
    ) async throws {
        try await pool.writeWithoutTransaction { db in
            let page = try Self.indexPage(
                db, bucket: bucket, afterKey: afterKey, offset: offset, limit: limit,
                includeData: includeData, maxDataBytes: maxDataBytes, history: history.number
            )
            deliverInLine { deliver(page) }
        }
    }

    /// Reads every change after `cv` and hands the result to `deliver` (ordered with
    /// broadcasts, as for `readIndexPage`).
    /// - Parameter maxDiffBytes: a catch-up whose diffs add up to more is answered as unknown
    ///   (`cv:?`): the client then loads the index page by page, at its own pace, instead of
    ///   getting more than its connection's outbound buffer holds (issue 20).
    func readChanges(
        bucket: BucketHandle, since cv: String, maxDiffBytes: Int = .max, deliver: @escaping @Sendable (CatchUp) -> Void
    ) async throws {
        try await pool.writeWithoutTransaction { db in
            let catchUp = try Self.catchUp(db, bucket: bucket, since: cv, history: history.number, maxDiffBytes: maxDiffBytes)
            deliverInLine { deliver(catchUp) }
        }
    }

    /// From inside a writer access: runs `deliver` on the completion queue once the broadcasts
    /// of every batch committed so far have gone out, and keeps the writer (so any later
    /// batch's broadcasts) waiting until it has.
    private func deliverInLine(_ deliver: @Sendable () -> Void) {
        completionQueue.sync { deliver() }
    }

    /// `key` at `version`, if that version is kept and is not a deletion: its data, and when
    /// the server accepted it (nil for versions kept from before it recorded that).
    func entityVersion(bucket: BucketHandle, key: String, version: Int) async throws -> KeptVersion? {
        let row = try await pool.read { db in
            try Row.fetchOne(
                db,
                sql: """
                    SELECT v.data, v.accepted_at, (
                        SELECT c.ccid FROM changes c WHERE c.bucket_id = v.bucket_id AND c.key = v.key AND c.end_version = v.version
                        ORDER BY c.cv DESC LIMIT 1
                    ) AS ccid
                    FROM entity_versions v WHERE v.bucket_id = ? AND v.key = ? AND v.version = ?
                    """,
                arguments: [bucket.id, key, version]
            )
        }
        guard let row else { return nil }
        return KeptVersion(
            data: try Self.decodeObject(row["data"], what: "entity \(key).\(version)"), acceptedAt: row["accepted_at"],
            ccid: row["ccid"])
    }

    func entity(bucket: BucketHandle, key: String) async throws -> EntityState? {
        let row = try await pool.read { db in
            try Row.fetchOne(db, sql: "SELECT version, data FROM entities WHERE bucket_id = ? AND key = ?", arguments: [bucket.id, key])
        }
        guard let row else { return nil }
        let text: String? = row["data"]
        return EntityState(version: row["version"], data: try text.map { try Self.decodeObject($0, what: "entity \(key)") })
    }

    /// Drops all but the newest `keepingLast` changes of a user's bucket from the change log;
    /// clients behind the dropped ones get `cv:?`. Returns how many changes were dropped.
    @discardableResult
    public func compactChangeLog(username: String, bucket name: String, keepingLast: Int) async throws -> Int {
        try await pool.write { db in
            guard let bucketID = try Int64.fetchOne(
                db,
                sql: "SELECT buckets.id FROM buckets JOIN users ON users.id = buckets.user_id WHERE users.username = ? AND buckets.name = ?",
                arguments: [username, name]
            ) else { return 0 }
            return try Self.compact(db, bucketID: bucketID, keepingLast: max(0, keepingLast))
        }
    }

    // MARK: - Queries (run inside a database access)

    static func lastChangeVersion(_ db: Database) throws -> Int64 {
        // Cached: every commit of changes reads it, and preparing it took a tenth of the
        // server's work on a change (issue 40).
        try Int64.fetchOne(db.cachedStatement(sql: "SELECT last_cv FROM server_state WHERE id = 1")) ?? 0
    }

    /// The bucket's current cv in `history`: its newest change's, or its base's when the log is empty.
    static func currentChangeVersion(_ db: Database, bucketID: Int64, history: UInt64) throws -> String {
        if let newest = try Row.fetchOne(
            db, sql: "SELECT cv, key, ccid, end_version FROM changes WHERE bucket_id = ? ORDER BY cv DESC LIMIT 1",
            arguments: [bucketID])
        {
            return ChangeSequence.render(
                newest["cv"], key: newest["key"], ccid: newest["ccid"], endVersion: newest["end_version"], history: history)
        }
        let base = try Row.fetchOne(db, sql: "SELECT base_cv, base_tag FROM buckets WHERE id = ?", arguments: [bucketID])
        return ChangeSequence.renderBase(base?["base_cv"] ?? 0, storedTag: base?["base_tag"], bucketID: bucketID, history: history)
    }

    static func indexPage(
        _ db: Database, bucket: BucketHandle, afterKey: String?, offset: Int, limit: Int, includeData: Bool,
        maxDataBytes: Int = .max, history: UInt64
    ) throws -> IndexPage {
        let current = try currentChangeVersion(db, bucketID: bucket.id, history: history)
        // One extra row tells whether another page follows, without a COUNT.
        let rows = try Row.fetchAll(
            db,
            sql: """
                SELECT key, version, \(includeData ? "data" : "NULL AS data") FROM entities
                WHERE bucket_id = ? AND data IS NOT NULL AND key > ?
                ORDER BY key LIMIT ? OFFSET ?
                """,
            arguments: [bucket.id, afterKey ?? "", limit + 1, offset]
        )
        return try IndexPageRows.page(
            rows.map { IndexPageRows.Row(key: $0["key"], version: $0["version"], data: $0["data"]) },
            current: current, limit: limit, maxDataBytes: maxDataBytes
        )
    }

    static func catchUp(_ db: Database, bucket: BucketHandle, since text: String, history: UInt64, maxDiffBytes: Int = .max) throws -> CatchUp {
        guard let (since, tag) = ChangeSequence.parse(text, history: history),
              let baseRow = try Row.fetchOne(db, sql: "SELECT base_cv, base_tag FROM buckets WHERE id = ?", arguments: [bucket.id])
        else { return .unknown }
        let base: Int64 = baseRow["base_cv"]
        // Known cvs are the base and every retained change of this bucket, each with its tag;
        // anything else (another bucket's cv, a compacted one, a made-up one, one from another
        // history of this database: a restore) cannot be caught up from.
        if since != base || tag != ChangeSequence.baseTag(base, storedTag: baseRow["base_tag"], bucketID: bucket.id) {
            let named = try Row.fetchOne(
                db,
                sql: "SELECT key, ccid, end_version FROM changes WHERE bucket_id = ? AND cv = ?",
                arguments: [bucket.id, since]
            )
            guard let named, ChangeSequence.tag(key: named["key"], ccid: named["ccid"], endVersion: named["end_version"]) == tag
            else { return .unknown }
        }
        if maxDiffBytes < .max {
            let diffBytes = try Int.fetchOne(
                db,
                sql: "SELECT COALESCE(SUM(LENGTH(CAST(diff AS BLOB))), 0) FROM changes WHERE bucket_id = ? AND cv > ?",
                arguments: [bucket.id, since]
            ) ?? 0
            guard diffBytes <= maxDiffBytes else { return .unknown }
        }
        let rows = try Row.fetchAll(
            db,
            sql: "SELECT * FROM changes WHERE bucket_id = ? AND cv > ? ORDER BY cv",
            arguments: [bucket.id, since]
        )
        return .changes(try rows.map(storedChange(from:)))
    }

    static func storedChange(from row: Row) throws -> StoredChange {
        try StoredChange(
            cv: row["cv"], key: row["key"], clientID: row["client_id"], ccid: row["ccid"],
            operationText: row["operation"], diffText: row["diff"], sourceVersion: row["source_version"], endVersion: row["end_version"]
        )
    }

    static func decodeObject(_ text: String, what: String) throws -> JSONObject {
        guard let object = (try? JSONValue(parsing: text))?.objectValue else {
            throw SyncServerError.corruptRecord(what)
        }
        return object
    }

    /// Keeps the newest `keepingLast` changes of a bucket. Applied (and refused) ccids are pruned
    /// one compaction later than their changes, so a client resending an old change still gets
    /// 409 (or its refusal).
    static func compact(_ db: Database, bucketID: Int64, keepingLast: Int) throws -> Int {
        let cutoff = try Int64.fetchOne(
            db,
            sql: "SELECT cv FROM changes WHERE bucket_id = ? ORDER BY cv DESC LIMIT 1 OFFSET ?",
            arguments: [bucketID, keepingLast]
        )
        guard let cutoff else { return 0 }
        // The cutoff becomes the base: clients handed its cv (with its change's tag) catch up from it.
        let last = try Row.fetchOne(
            db, sql: "SELECT key, ccid, end_version FROM changes WHERE bucket_id = ? AND cv = ?", arguments: [bucketID, cutoff])
        let baseTag = last.map { Int64(bitPattern: ChangeSequence.tag(key: $0["key"], ccid: $0["ccid"], endVersion: $0["end_version"])) }
        try db.execute(sql: "DELETE FROM changes WHERE bucket_id = ? AND cv <= ?", arguments: [bucketID, cutoff])
        let dropped = db.changesCount
        let previousBase = try Int64.fetchOne(db, sql: "SELECT base_cv FROM buckets WHERE id = ?", arguments: [bucketID]) ?? 0
        try db.execute(sql: "DELETE FROM applied_ccids WHERE bucket_id = ? AND cv <= ?", arguments: [bucketID, previousBase])
        try db.execute(sql: "DELETE FROM refused_ccids WHERE bucket_id = ? AND cv <= ?", arguments: [bucketID, previousBase])
        try db.execute(
            sql: """
                UPDATE buckets SET base_cv = ?, base_tag = ?, ccid_floor = ?,
                    change_count = (SELECT COUNT(*) FROM changes WHERE bucket_id = ?) WHERE id = ?
                """,
            arguments: [cutoff, baseTag, previousBase, bucketID, bucketID]
        )
        return dropped
    }
}
