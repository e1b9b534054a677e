import Foundation
import GRDB
import JSONDiff
import SQLiteStatements

/// What a local save did.
public struct SaveResult: Hashable, Sendable {
    /// The entity after the save.
    public let entity: EntityInfo
    /// Set when the bytes are not a JSON object: they are kept, but nothing is sent.
    public let parseError: String?
    /// The change to send now, if the entity has none in flight.
    public let readyToSend: OutgoingChange?
    /// The bytes are kept, not parsed yet: `SyncStore.finishDeferredParse` does the rest.
    public var parsedLater = false
}

/// What `save` and `settle` leave, nothing decoded for a caller yet: `SaveResult.entity` parses
/// the ghost and copies the file's bytes, which the journal's saves, renames and deferred
/// parses never look at (for a 16 MiB note, a copy of it and a parse of the value before).
struct SavedRow {
    var row: EntityRow
    var value: JSONObject?
    var parseError: String?
    var readyToSend: OutgoingChange?
    var parsedLater = false

    /// The public result, the entity as `SyncStore.entity` shows it.
    func result(bucket: String, _ db: Database) throws -> SaveResult {
        SaveResult(
            entity: try row.info(bucket: bucket, value: value, decodingValues: !parsedLater, db), parseError: parseError,
            readyToSend: readyToSend, parsedLater: parsedLater)
    }
}

extension SyncStore {
    /// Saves the file's new bytes durably and queues the change (coalesced with any unsent one).
    /// The bytes are kept exactly; if they are not a JSON object the entity becomes `invalid`.
    ///
    /// `markingSent`: the caller writes the change to a live connection right after, so it is
    /// recorded as sent in this same transaction (what `markSent` would do in a second one).
    /// `durability` `.deferred` (a file closed but not fsynced): see `syncDeferredWrites()`.
    /// `nodeID`: the number of a file the caller created before its first save (one from
    /// `reserveNodeIDs`, never used since); the entity's file takes it, and a new entity's row too.
    public func saveLocal(
        bucket: String, key: String, bytes: [UInt8], nodeID: Int64? = nil, markingSent: Bool = false,
        durability: Durability = .synced
    ) throws(StoreError) -> SaveResult {
        try write(durability) { db in
            let bucketRow = try BucketRow.named(bucket, db)
            let moved = nodeID.map { MovedFile(nodeID: $0, mode: nil, atime: nil) }
            var saved = try Self.save(
                .bytes(bytes), key: key, bucket: bucketRow, now: Self.now(), moved: moved, reservedID: nodeID, db)
            try claim(&saved, markingSent: markingSent, db)
            return try saved.result(bucket: bucket, db)
        }
    }

    /// Edits the local value atomically: `edit` gets the current value (nil if none) and returns
    /// the new one, in the same transaction as the save, so a remote change applied meanwhile
    /// is never overwritten by a stale read.
    public func modifyLocal(
        bucket: String, key: String, _ edit: (JSONObject?) throws -> JSONObject
    ) throws(StoreError) -> SaveResult {
        try write { db in
            let bucketRow = try BucketRow.named(bucket, db)
            _ = try parseFirst(keys: [key], bucket: bucketRow, db)
            let current = try EntityRow.find(bucketID: bucketRow.id, key: key, db).flatMap { $0.hasFile ? try $0.local() : nil }
            return try Self.save(.value(try edit(current)), key: key, bucket: bucketRow, now: Self.now(), db).result(bucket: bucket, db)
        }
    }

    /// Saves a JSON object (rendered in the bucket's file format) durably and queues the change;
    /// `markingSent` as for a save of bytes.
    public func saveLocal(bucket: String, key: String, value: JSONObject, markingSent: Bool = false) throws(StoreError) -> SaveResult {
        try write { db in
            var saved = try Self.save(.value(value), key: key, bucket: try BucketRow.named(bucket, db), now: Self.now(), db)
            try claim(&saved, markingSent: markingSent, db)
            return try saved.result(bucket: bucket, db)
        }
    }

    /// `markingSent`: the save's change, queued, is claimed as the engine claims it (a change
    /// handed over `leftInStore` comes back decoded).
    func claim(_ saved: inout SavedRow, markingSent: Bool, _ db: Database) throws {
        guard markingSent, let change = saved.readyToSend, change.state == .queued else { return }
        saved.readyToSend = try claim(change, decodingAtMost: .max, db)
    }

    /// Deletes the entity's file durably; the removal is queued for the server (an entity that
    /// never reached the server is simply forgotten).
    public func deleteLocal(bucket: String, key: String, durability: Durability = .synced) throws(StoreError) -> OutgoingChange? {
        try write(durability) { db in
            let bucketRow = try BucketRow.named(bucket, db)
            return try Self.delete(key: key, bucket: bucketRow, now: Self.now(), db)
        }
    }

    /// Creates or replaces a local-only file (editor scratch names); never sent. `newID`: the id
    /// a file that does not exist yet gets (one from `reserveNodeIDs`), else a fresh one.
    public func writeLocalFile(
        bucket: String, name: String, bytes: [UInt8], newID: Int64? = nil, durability: Durability = .synced
    ) throws(StoreError) -> LocalFileInfo {
        try write(durability) { db in
            let bucketRow = try BucketRow.named(bucket, db)
            let now = Self.now()
            // Bound without a copy (a scratch file may be hundreds of MiB): SQLite copies what it
            // binds, and the caller's bytes outlive the statement. The result shares them too.
            let row = try bytes.withUnsafeBytes { buffer in
                let content = buffer.baseAddress.map {
                    Data(bytesNoCopy: UnsafeMutableRawPointer(mutating: $0), count: buffer.count, deallocator: .none)
                } ?? Data()
                return try Self.putLocalFile(
                    bucketID: bucketRow.id, name: name, content: content, mtime: now, now: now, newID: newID, db)
            }
            return LocalFileInfo(id: row.id, bucket: bucket, name: name, content: bytes, mtime: row.mtime, ctime: row.ctime)
        }
    }

    /// Takes `count` node ids that nothing in the store will ever use, for files the caller
    /// creates before it first writes them (`writeLocalFile(newID:)`). A crash may lose the
    /// reservation only together with every write that used one of its ids (the WAL is ordered).
    public func reserveNodeIDs(count: Int) throws(StoreError) -> ClosedRange<Int64> {
        precondition(count > 0, "reserve at least one id")
        let first = try write(.deferred) { db in try Schema.allocateNodeIDs(db, count: count) }
        return first...(first + Int64(count) - 1)
    }

    /// Removes a local-only file.
    public func removeLocalFile(bucket: String, name: String, durability: Durability = .synced) throws(StoreError) {
        try write(durability) { db in try Self.removeLocalFile(name, bucket: try BucketRow.named(bucket, db), db) }
    }

    /// `removeLocalFile` inside the caller's transaction.
    static func removeLocalFile(_ name: String, bucket: BucketRow, _ db: Database) throws {
        guard let row = try LocalFileRow.find(bucketID: bucket.id, name: name, db) else {
            throw StoreError.unknownLocalFile(bucket: bucket.name, name: name)
        }
        try row.delete(db)
    }

    /// Renames within a bucket as one atomic replace: a scratch file renamed onto `key` is a save
    /// of that entity; `a` renamed to `b` is a save of `b` plus a delete of `a`; a local file
    /// renamed to another local name keeps its id.
    public func rename(
        bucket: String, from source: EntryName, to target: EntryName, durability: Durability = .synced
    ) throws(StoreError) -> RenameResult {
        try write(durability) { db in
            try Self.rename(bucket: try BucketRow.named(bucket, db), from: source, to: target, now: Self.now(), db)
        }
    }

    /// `rename` inside the caller's transaction, made at `now`.
    static func rename(
        bucket bucketRow: BucketRow, from source: EntryName, to target: EntryName, now: Int64, parsingLaterFrom: Int? = nil,
        _ db: Database
    ) throws -> RenameResult {
        let bucket = bucketRow.name
        var ready: [OutgoingChange] = []
        let destination: DirectoryEntry
        var parsedLater = false
        let bytes: [UInt8]
        var sourceSize: Int? = nil
        // rename(2) moves the file, times included (`rsync -a` sets the temp file's mtime, then renames it).
        let sourceMTime: StoreTime
        // The file keeps its inode number, permission bits and access time under its new name,
        // as on any local file system.
        let moved: MovedFile
        switch source {
        case .entity(let key):
            guard let row = try EntityRow.find(bucketID: bucketRow.id, key: key, db), let content = try row.content(db) else {
                throw StoreError.unknownEntity(bucket: bucket, key: key)
            }
            bytes = content
            sourceMTime = row.mtime
            moved = MovedFile(nodeID: row.nodeID, mode: row.mode, atime: row.atime)
        case .localFile(let name) where target.isEntity:
            // The editor's save: the scratch file becomes the entity's bytes, and goes.
            guard let row = try LocalFileRow.find(bucketID: bucketRow.id, name: name, db) else {
                throw StoreError.unknownLocalFile(bucket: bucket, name: name)
            }
            // An entity's bytes are parsed and held whole: a gigabyte scratch file cannot become one.
            guard row.byteCount <= entityFileLimit else {
                throw StoreError.tooLarge("\(name) (\(row.byteCount) bytes) as an entity's file (at most \(entityFileLimit))")
            }
            bytes = try row.contentID.map { try assemble(LocalContent(id: $0, size: row.byteCount), db) } ?? [UInt8](row.content)
            try db.cachedStatement(sql: "DELETE FROM local_file WHERE id = ?").execute(binding: row.id)
            sourceMTime = row.mtime
            moved = MovedFile(nodeID: row.id, mode: row.mode, atime: row.atime)
        case .localFile(let name):
            guard let row = try LocalFileRow.find(bucketID: bucketRow.id, name: name, db) else {
                throw StoreError.unknownLocalFile(bucket: bucket, name: name)
            }
            // Renamed to another local name, the row moves with its chunks: no bytes are copied.
            bytes = []
            sourceSize = row.byteCount
            sourceMTime = row.mtime
            moved = MovedFile(nodeID: row.id, mode: row.mode, atime: row.atime)
        }
        guard source != target else {
            guard let unchanged = try lookup(bucket: bucket, name: target, db) else {
                throw StoreError.database("renamed \(target) is missing")
            }
            return RenameResult(changes: [], destination: unchanged)
        }
        switch (source, target) {
        case (.localFile(let from), .localFile(let to)):
            try db.execute(
                sql: "DELETE FROM local_file WHERE bucket_id = ? AND name = ?", arguments: [bucketRow.id, to])
            let movedID = try Int64.fetchOne(
                db, sql: "UPDATE local_file SET name = ?, ctime = ? WHERE bucket_id = ? AND name = ? RETURNING id",
                arguments: [to, now, bucketRow.id, from])
            guard let movedID else { throw StoreError.unknownLocalFile(bucket: bucket, name: from) }
            destination = DirectoryEntry(
                id: movedID, name: target, size: sourceSize ?? bytes.count, mtime: sourceMTime, ctime: now, mode: moved.mode, atime: moved.atime)
        case (.localFile, .entity(let key)):
            let saved = try Self.save(
                .bytes(bytes), key: key, bucket: bucketRow, now: now, mtime: sourceMTime, moved: moved,
                parsingLaterFrom: parsingLaterFrom, db)
            if let change = saved.readyToSend { ready.append(change) }
            destination = saved.row.directoryEntry
            parsedLater = saved.parsedLater
        case (.entity(let from), .entity(let key)):
            // The source's row gives up the number first (`delete` hands it a fresh one or drops it).
            if let change = try Self.delete(key: from, bucket: bucketRow, now: now, db) { ready.append(change) }
            let saved = try Self.save(
                .bytes(bytes), key: key, bucket: bucketRow, now: now, mtime: sourceMTime, moved: moved,
                parsingLaterFrom: parsingLaterFrom, db)
            if let change = saved.readyToSend { ready.append(change) }
            destination = saved.row.directoryEntry
            parsedLater = saved.parsedLater
        case (.entity(let from), .localFile(let name)):
            if let change = try Self.delete(key: from, bucket: bucketRow, now: now, db) { ready.append(change) }
            try db.execute(
                sql: "DELETE FROM local_file WHERE bucket_id = ? AND name = ?", arguments: [bucketRow.id, name])
            let file = LocalFileRow(
                id: moved.nodeID, bucketID: bucketRow.id, name: name, content: Data(bytes), mtime: sourceMTime, ctime: now,
                mode: moved.mode, atime: moved.atime)
            try file.insert(db)
            destination = file.directoryEntry
        }
        return RenameResult(changes: ready, destination: destination, parsedLater: parsedLater)
    }

    /// Creates or replaces a local file's bytes inside the caller's transaction; `mtime` is now,
    /// or the time a rename carries over. Editors write their scratch files on every save: one
    /// statement when the file exists, or when its id is known (`newID`).
    static func putLocalFile(
        bucketID: Int64, name: String, content: Data, mtime: Int64, now: Int64, newID: Int64? = nil, _ db: Database
    ) throws -> LocalFileRow {
        if let newID {
            let upsert = try db.cachedStatement(
                sql: """
                    INSERT INTO local_file (id, bucket_id, name, content, mtime, ctime) VALUES (?, ?, ?, ?, ?, ?)
                    ON CONFLICT (bucket_id, name) DO UPDATE SET content = excluded.content, mtime = excluded.mtime,
                    ctime = excluded.ctime, content_id = NULL, size = NULL RETURNING id
                    """)
            guard let id = try Int64.fetchOne(upsert, arguments: [newID, bucketID, name, content, mtime, now]) else {
                throw StoreError.database("local file \(name) was not written")
            }
            return LocalFileRow(id: id, bucketID: bucketID, name: name, content: content, mtime: mtime, ctime: now)
        }
        let update = try db.cachedStatement(
            sql: """
                UPDATE local_file SET content = ?, mtime = ?, ctime = ?, content_id = NULL, size = NULL
                WHERE bucket_id = ? AND name = ? RETURNING id
                """)
        let id = try Int64.fetchOne(update, arguments: [content, mtime, now, bucketID, name])
        let row = LocalFileRow(
            id: try id ?? Schema.allocateNodeID(db), bucketID: bucketID, name: name, content: content, mtime: mtime, ctime: now)
        if id == nil { try row.insert(db) }
        return row
    }

    /// What a save writes: bytes written to the entity's file, or a value (the API's saves).
    enum Written {
        case bytes([UInt8])
        case value(JSONObject)
    }

    /// Saves the entity's file: bytes written to it (parsed in the bucket's file format), or a
    /// value (rendered in it). `mtime` is the file's new modification time (now, or the time a
    /// rename carries over). The row is written once when it exists already. `moved`: the file a
    /// rename brings (its inode number and metadata); else the entity's file keeps its own, or a
    /// new one gets a new number. `reservedID`: an id nothing in the store has used (from
    /// `reserveNodeIDs`, for a file made before its first save), which a new row takes as its
    /// own instead of allocating one (a rename's `moved` number may still be its source row's).
    ///
    /// `parsingLaterFrom`: bytes this many or more (of a format that parses them alone, as JSON
    /// does) go in as the file's bytes only, `unparsed`, and `SaveResult.parsedLater` says so: the
    /// caller has them parsed, diffed and queued outside this transaction (`finishDeferredParse`),
    /// so a note of several MiB holds up no other file's save (issue 37).
    static func save(
        _ written: Written, key: String, bucket: BucketRow, now: Int64, mtime: Int64? = nil, moved: MovedFile? = nil,
        reservedID: Int64? = nil, parsingLaterFrom: Int? = nil, _ db: Database
    ) throws -> SavedRow {
        var row: EntityRow
        let isNew: Bool
        if let existing = try EntityRow.find(bucketID: bucket.id, key: key, db) {
            row = existing
            isNew = false
            // A new save supersedes an earlier refusal: the user changed something, so try again.
            try db.cachedStatement(sql: "DELETE FROM pending_change WHERE entity_id = ? AND state LIKE 'rejected:%'")
                .execute(binding: row.id)
        } else {
            // Inserted once, whole, below: before its queued change, which refers to it.
            row = try EntityRow.new(bucketID: bucket.id, key: key, now: now, id: reservedID, db)
            isNew = true
        }
        // Made again after a removal the server has not confirmed yet (`removeFile`): a new file.
        let madeAgain = row.deletedPending && !row.hasFile
        let parsed: Result<JSONObject, EntityFileFormatError>
        switch written {
        case .bytes(let bytes) where parsingLaterFrom.map({ bytes.count >= $0 }) ?? false && !bucket.format.parsesOntoBase:
            row.setContent(bytes)
            try row.place(moved: moved, madeAgain: madeAgain, mtime: mtime ?? now, ctime: now, db)
            row.unparsed = true
            row.reason = nil
            row.state = EntityState.pending.description
            try isNew ? row.insert(db) : row.update(db)
            return SavedRow(row: row, value: nil, parseError: nil, readyToSend: nil, parsedLater: true)
        case .bytes(let bytes):
            // A file made again after a removal builds on the last value the server has.
            let replacingFile = row.hasFile
            let base = bucket.format.parsesOntoBase ? try row.local() ?? (row.ghostVersion == nil ? nil : try row.ghost()) : nil
            parsed = bucket.format.parse(bytes, base: base, replacingFile: replacingFile, at: now)
            row.setContent(bytes)
        case .value(let value):
            parsed = .success(value)
            row.setContent(bucket.format.render(value))
        }
        try row.place(moved: moved, madeAgain: madeAgain, mtime: mtime ?? now, ctime: now, db)
        row.unparsed = false
        return try settle(&row, parsed: parsed, isNew: isNew, bucket: bucket, db)
    }

    /// The rest of a save once its bytes are parsed (or its value given): the local value, the
    /// state and the queued change; writes the row (`isNew`: inserts it).
    /// `compact`: the value's compact JSON when the caller rendered it already; `diffed`: its
    /// diff from a ghost, computed already (used if the row's ghost is still that one).
    static func settle(
        _ row: inout EntityRow, parsed: Result<JSONObject, EntityFileFormatError>, compact: String? = nil,
        diffed: ComputedDiff? = nil, refusingOver limit: Int? = nil, isNew: Bool, bucket: BucketRow, _ db: Database
    ) throws -> SavedRow {
        switch parsed {
        case .success(let object):
            return try settle(
                &row, value: object, compact: compact ?? StoredJSON.text(object), diffed: diffed, refusingOver: limit, isNew: isNew,
                bucket: bucket, db)
        case .failure(let problem):
            // The last valid value may still have a change owed; keep it, but show `invalid`.
            row.state = EntityState.invalid.description
            row.reason = problem.description
            try isNew ? row.insert(db) : row.update(db)
            return SavedRow(row: row, value: nil, parseError: problem.description, readyToSend: nil)
        }
    }

    /// `settle` of bytes parsed to a value, given by its compact text `compact` (and `value`, the
    /// value itself, when the caller holds it: nil, it is parsed from the text only if needed).
    static func settle(
        _ row: inout EntityRow, value: JSONObject?, compact: String, diffed: ComputedDiff? = nil, refusingOver limit: Int? = nil,
        isNew: Bool, bucket: BucketRow, _ db: Database
    ) throws -> SavedRow {
        row.localValue = compact
        row.editSeq += 1
        let ready: OutgoingChange?
        if isNew {
            // What `reconcileQueue` makes of an entity the server has never seen, with no change
            // yet: its first change, queued, and the state `pending`. The row goes in once, with
            // that state, before the change that refers to it (one write each, no lookup).
            row.reason = nil
            row.state = EntityState.pending.description
            try row.insert(db)
            ready = try reconcileQueue(&row, local: value, hasNoChange: true, bucket: bucket.name, db)
        } else {
            row.reason = nil
            row.state = EntityState.synced.description
            ready = try reconcileQueue(&row, local: value, diffed: diffed, refusingOver: limit, bucket: bucket.name, db)
            try row.update(db)
        }
        return SavedRow(row: row, value: value, parseError: nil, readyToSend: ready)
    }

    static func delete(key: String, bucket: BucketRow, now: Int64, _ db: Database) throws -> OutgoingChange? {
        guard var row = try EntityRow.find(bucketID: bucket.id, key: key, db), row.hasFile else {
            throw StoreError.unknownEntity(bucket: bucket.name, key: key)
        }
        // The value the removal takes (or a trash flag keeps) is the one the file last held.
        _ = try parseNow(&row, bucket: bucket, db)
        if let value = try row.local(), let kept = bucket.format.removal(of: value, at: now) {
            // The format keeps the entity (a trash flag): a save of that value, without a file.
            // A file made under the key later is a new file, with a number no descriptor holds.
            row.nodeID = try Schema.allocateNodeID(db)
            try row.update(db)
            return try save(.value(kept), key: key, bucket: bucket, now: now, db).readyToSend
        }
        let inFlight = try ChangeRow.open(entityID: row.id, db).map { $0.state != "queued" } ?? false
        if row.ghostVersion == nil && !inFlight {
            // Never reached the server: nothing to tell it.
            try row.delete(db)
            try rememberRemovalOfAKnownNote(key: key, bucket: bucket, db)
            return nil
        }
        row.removeFile(now: now)
        row.deletedPending = true
        row.reason = nil
        // Invalid bytes go with the file: nothing is left to fix (`reconcileQueue` says pending).
        if row.state == EntityState.invalid.description { row.state = EntityState.pending.description }
        let ready = try reconcileQueue(&row, bucket: bucket.name, db)
        try row.update(db)
        return ready
    }

    /// A file removed before it reached the server, under the key of a note this store knew at
    /// a server version (the file was made again after that note was removed, or the server
    /// lost the note and this store's copy was to be created again): the user removed that note
    /// too. A server restored from a backup that holds it lists it again, and this store is
    /// then the one to remove it again (`applyIndexPage`).
    static func rememberRemovalOfAKnownNote(key: String, bucket: BucketRow, _ db: Database) throws {
        guard let known = try highestVersionKnown(key: key, bucket: bucket, db) else { return }
        try db.cachedStatement(
            sql: """
                INSERT INTO removed_entity (bucket, key, last_version, removed_here) VALUES (?, ?, ?, 1)
                ON CONFLICT (bucket, key) DO UPDATE SET removed_here = 1
                """
        ).execute(binding: bucket.name, key, known)
    }

    /// The highest version of `key` this store has known a note at, before its row's ghost moved
    /// lower (a restored server) or its row went (`Schema`'s triggers keep it); nil if none.
    static func highestVersionKnown(key: String, bucket: BucketRow, _ db: Database) throws -> Int? {
        try Int.fetchOne(
            db.cachedStatement(sql: "SELECT version FROM entity_highest_version WHERE bucket = ? AND key = ?"),
            arguments: [bucket.name, key])
    }

    /// A change whose diff takes more bytes is handed over `leftInStore`: the engine reads it
    /// back when it sends it, one at a time, rather than many waiting decoded.
    static let handedDecodedUpTo = 1 << 20

    /// Brings the entity's unsent change in line with its local value (coalescing saves: one
    /// change in flight per entity, the next one computed when it is acknowledged), and sets
    /// the entity's state. Returns the change if one is ready to send now. `local`: the row's
    /// local value when the caller holds it parsed already (a save just parsed the bytes).
    /// `hasNoChange`: the caller knows the entity has no change row (it has just inserted it).
    /// `diffed`: the local value's diff from a ghost, computed outside the transaction; used
    /// when the row's ghost is that one still. `refusingOver`: a diff of more bytes is queued
    /// refused (`rejected:413`), not handed over (`SyncStore.refuseChanges`).
    static func reconcileQueue(
        _ row: inout EntityRow, local parsedLocal: JSONObject? = nil, diffed: ComputedDiff? = nil, refusingOver limit: Int? = nil,
        hasNoChange: Bool = false, bucket: String, _ db: Database
    ) throws -> OutgoingChange? {
        let open = hasNoChange ? nil : try ChangeRow.open(entityID: row.id, db)
        if row.needsReload && row.ghostVersion != nil {
            // The ghost is not a server version until the reload arrives; a diff against it
            // could not be applied by the server. The reload recomputes the change.
            if row.state != EntityState.invalid.description { row.state = EntityState.pending.description }
            return nil
        }
        if let open, open.state != "queued" {
            // In flight: the next change is computed when it is acknowledged. A sent change is
            // returned so that one held back (reload, reconnect) goes out; the engine does not
            // repeat it on the connection that already carried it. A 409'd one waits for its echo.
            row.state = EntityState.pending.description
            return open.state == "sent" ? try open.outgoing(bucket: bucket, key: row.key) : nil
        }
        var op = "M"
        var diff: JSONObject?
        var diffText: String?
        var diffBytes: Int?
        if row.deletedPending {
            if row.ghostVersion == nil {
                // Removal of something the server never had: drop the queued change, keep nothing.
                if let open { try open.delete(db) }
                row.state = EntityState.synced.description
                return nil
            }
            op = "-"
        } else if parsedLocal != nil || row.localValue != nil {
            let precomputed = diffed.flatMap { diffed -> ComputedDiff? in
                guard exactlyEqual(diffed.ghost, row.ghostData) else { return nil }
                // One left unwritten as too large stands only while the limit says so.
                guard diffed.text != nil || limit.map({ diffed.byteCount > $0 }) == true else { return nil }
                return diffed
            }
            // The value parsed from its text only when no diff was computed from this ghost.
            let computed = try precomputed == nil ? (try parsedLocal ?? row.local()).map { try Merge.diff(from: try row.ghost(), to: $0) } : nil
            if precomputed?.isEmpty ?? computed?.isEmpty ?? true, row.ghostVersion != nil {
                if let open { try open.delete(db) }
                if row.state != EntityState.invalid.description { row.state = EntityState.synced.description }
                return nil
            }
            diff = precomputed?.diff ?? computed
            diffText = precomputed?.text ?? computed.map(StoredJSON.text)
            diffBytes = precomputed?.byteCount ?? diffText?.utf8.count
        } else {
            if let open { try open.delete(db) }
            return nil
        }
        var change = open ?? ChangeRow(
            seq: nil, entityID: row.id, ccid: newCCID(), sv: nil, op: op, diff: nil, fullData: nil,
            state: "queued", created: now())
        change.op = op
        change.diff = diffText
        change.sv = row.ghostVersion
        change.fullData = nil
        change.editSeq = row.editSeq
        if let limit, let bytes = diffBytes, bytes > limit {
            change.state = "rejected:413"
            // Never sent, and the next save replaces it: its diff is not kept.
            change.diff = nil
            try change.save(db)
            row.state = EntityState.rejected(code: 413).description
            row.reason = tooLargeToSend(bytes: bytes, limit: limit)
            return nil
        }
        try change.save(db)
        if row.state != EntityState.invalid.description { row.state = EntityState.pending.description }
        let basis = diffText.flatMap { diff in
            row.localValue.map { SentChanges.Sent(sourceVersion: row.ghostVersion, diff: diff, ghost: row.ghostData, result: $0) }
        }
        return try change.outgoing(bucket: bucket, key: row.key, diff: diff, basis: basis, decodingAtMost: handedDecodedUpTo)
    }
}

extension EntityRow {
    /// Where a save leaves the file: the number and metadata a rename brings (`moved`), a new
    /// number for a file made again after its removal, else its own; and the save's times.
    mutating func place(moved: MovedFile?, madeAgain: Bool, mtime: Int64, ctime: Int64, _ db: Database) throws {
        if let moved {
            (nodeID, mode, atime) = (moved.nodeID, moved.mode, moved.atime)
        } else if madeAgain {
            nodeID = try Schema.allocateNodeID(db)
        }
        self.mtime = mtime
        self.ctime = ctime
        deletedPending = false
    }
}

/// A value's diff from a ghost, and its text, computed before the transaction that queues it.
struct ComputedDiff {
    /// The ghost's stored text it was computed from.
    let ghost: String
    /// Nil when only its text was made (a note created whole: `JSONValue.compactCreationDiff`).
    let diff: JSONObject?
    /// Nil when it was not written, being too large to send (`refused`).
    let text: String?
    /// The text's length, written or not.
    let byteCount: Int

    init(ghost: String, diff: JSONObject?, text: String) {
        (self.ghost, self.diff, self.text, byteCount) = (ghost, diff, text, text.utf8.count)
    }

    /// A diff of `byteCount` bytes over the limit a change may take (`SyncStore.refuseChanges`),
    /// known by its length alone: it would only be refused, so it is not written (issue 37: a
    /// note of 750,000 small keys made a creation diff of 26 MiB, and SQLite two copies more).
    init(ghost: String, refused byteCount: Int) {
        (self.ghost, diff, text, self.byteCount) = (ghost, nil, nil, byteCount)
    }

    var isEmpty: Bool { text == "{}" }
}

/// What a rename carries from the source file to its new name, besides the bytes and mtime.
struct MovedFile {
    let nodeID: Int64
    let mode: Int64?
    let atime: Int64?
}
