import Foundation
import GRDB
import JSONDiff
import SQLiteStatements

/// Stored JSON columns are compact JSON text; decoding failures mean a corrupt row.
enum StoredJSON {
    static func object(_ text: String, column: String) throws -> JSONObject {
        guard let value = try? JSONValue(parsing: text), let object = value.objectValue else {
            throw StoreError.corruptRow("\(column) is not a JSON object")
        }
        return object
    }

    static func text(_ object: JSONObject) -> String {
        JSONValue.object(object).compactRendered()
    }
}

// The records map their columns by hand (GRDB's `init(row:)` and `encode(to:)`) rather than
// through Codable: every file-system save reads and writes several of them, and Codable's
// per-column keyed containers cost more than the SQL around them. They are read by position, in
// the table's column order (every fetch selects `*`; GRDB's lookup by name lowercases the name
// and hashes it, per column per row); `RecordColumnOrderTests` holds each to its table. For the
// same reason the rows written on every save and acknowledgement have their own `update(_:)`
// and `delete(_:)` on cached statements, in place of GRDB's generic ones, which build their SQL
// on each call; they do the same (and throw `recordNotFound` the same way).

/// Reads a one-row lookup's columns by position straight from the SQLite statement. GRDB's `Row`
/// builds a dictionary of the statement's lowercased column names on every fetch, which for the
/// lookups each save and acknowledgement makes (bucket, entity, open change) costs more than the
/// query itself.
struct ColumnReader {
    let statement: SQLiteStatement

    func value<T: StatementColumnConvertible>(_ index: CInt) throws -> T {
        guard let value = T.fromStatement(statement, atUncheckedIndex: index) else {
            throw StoreError.corruptRow("column \(index) is NULL")
        }
        return value
    }

    func optional<T: StatementColumnConvertible>(_ index: CInt) -> T? {
        T.fromStatement(statement, atUncheckedIndex: index)
    }

    /// The first row `statement` gives with `arguments`, decoded by `decode`; nil if none. The
    /// statement is stepped to its end (one more step for these lookups by a unique key), so it
    /// holds nothing open afterwards.
    static func first<T, each Value: StatementBinding>(
        _ statement: Statement, binding values: repeat each Value, decode: @escaping (ColumnReader) throws -> T
    ) throws -> T? {
        try statement.bind(repeat each values)
        let cursor = PositionalCursor(statement, decode: decode)
        let first = try cursor.next()
        while try cursor.next() != nil {}
        return first
    }
}

/// GRDB's cursor protocol over a decoding closure (its `RecordCursor` goes through `Row`).
private final class PositionalCursor<Element>: DatabaseCursor {
    let _statement: Statement
    var _isDone = false
    private let decode: (ColumnReader) throws -> Element

    /// Over `statement` with its values bound (`Statement.bind`).
    init(_ statement: Statement, decode: @escaping (ColumnReader) throws -> Element) {
        _statement = statement
        self.decode = decode
    }

    func _element(sqliteStatement: SQLiteStatement) throws -> Element {
        try decode(ColumnReader(statement: sqliteStatement))
    }
}

struct BucketRow: FetchableRecord, PersistableRecord {
    static let databaseTableName = "bucket"
    var id: Int64
    var name: String
    var cv: String?
    var indexCV: String?
    var indexGeneration: Int64
    var ctime: Int64
    /// How its entities show as files (not a column of this table).
    var format: any EntityFileFormat = JSONFileFormat()

    init(id: Int64, name: String, cv: String?, indexCV: String?, indexGeneration: Int64, ctime: Int64) {
        self.id = id
        self.name = name
        self.cv = cv
        self.indexCV = indexCV
        self.indexGeneration = indexGeneration
        self.ctime = ctime
    }

    init(row: Row) {
        id = row[0]
        name = row[1]
        cv = row[2]
        indexCV = row[3]
        indexGeneration = row[4]
        ctime = row[5]
    }

    /// The columns of `named`: the table's, then the bucket's stored file format.
    init(_ columns: ColumnReader) throws {
        id = try columns.value(0)
        name = try columns.value(1)
        cv = columns.optional(2)
        indexCV = columns.optional(3)
        indexGeneration = try columns.value(4)
        ctime = try columns.value(5)
        if let text: String = columns.optional(6) { format = StoredFileFormat.format(text) }
    }

    /// On a cached statement: a batch of remote changes (every acknowledgement) stores the cv.
    func update(_ db: Database) throws {
        let statement = try db.cachedStatement(
            sql: "UPDATE bucket SET name = ?, cv = ?, index_cv = ?, index_generation = ?, ctime = ? WHERE id = ?")
        try statement.execute(binding: name, cv, indexCV, indexGeneration, ctime, id)
        guard db.changesCount > 0 else {
            throw RecordError.recordNotFound(databaseTableName: Self.databaseTableName, key: ["id": id.databaseValue])
        }
    }

    func encode(to container: inout PersistenceContainer) {
        container["id"] = id
        container["name"] = name
        container["cv"] = cv
        container["index_cv"] = indexCV
        container["index_generation"] = indexGeneration
        container["ctime"] = ctime
    }

    var info: BucketInfo { BucketInfo(id: id, name: name, cv: cv, ctime: ctime) }

    static func named(_ name: String, _ db: Database) throws -> BucketRow {
        // Cached statements here and below: these lookups run for every entity of a sync.
        let statement = try db.cachedStatement(
            sql: "SELECT bucket.*, f.format FROM bucket LEFT JOIN bucket_file_format f ON f.bucket_id = bucket.id WHERE name = ?")
        guard let row = try ColumnReader.first(statement, binding: name, decode: BucketRow.init) else {
            throw StoreError.unknownBucket(name)
        }
        return row
    }
}

struct EntityRow: FetchableRecord, PersistableRecord {
    static let databaseTableName = "entity"
    var id: Int64
    /// Fixed for the row's life (`update` does not write them).
    let bucketID: Int64
    let key: String
    var ghostVersion: Int?
    var ghostData: String
    var localValue: String?
    /// The length of the entity's file (`Schema` v15); nil while the entity has no file (deleted
    /// locally, or waiting for its first `e`). The bytes are in `entity_content`, read only when
    /// asked for (`content(_:)`): an update of the row's value or sync state neither reads nor
    /// rewrites a note of MiB (issue 37).
    private(set) var fileSize: Int?
    /// Bytes given since the row was read (`setContent`), written with the row (`.none`: the
    /// stored ones stand; `.some(nil)`: the file is gone).
    private var contentSet: [UInt8]?? = .none
    var mtime: Int64
    var ctime: Int64
    var state: String
    var reason: String?
    var deletedPending: Bool
    var reloadVersion: Int?
    var needsReload: Bool
    var seenGeneration: Int64
    /// The inode number of the entity's file (`Schema` v3): follows the file across renames.
    var nodeID: Int64
    /// Permission bits and access time of the file (`Schema` v3); nil: the defaults.
    var mode: Int64?
    var atime: Int64?
    /// The ghost's version is the server's result of a change of ours (`Schema` v9): after a
    /// restore from a backup, the mount that made the value the server lost is the one that sends
    /// it again (`SyncStore.applyIndexPage`); other replicas follow the server meanwhile, so a
    /// removal or an edit made since is not undone by every copy of the old value.
    var authored: Bool
    /// How many saves of the file have given the entity a value here (`Schema` v11), and how
    /// many of them the server has acknowledged: a change carries the count its value was
    /// computed at (`ChangeRow.editSeq`), and its acknowledgement raises `acknowledgedEditSeq` to
    /// it. A value that differs from the server's only by how the two merged concurrent changes
    /// (what goes after an acknowledgement with no save since) holds no edit of the user's the
    /// server has not had: a removal from elsewhere takes it (issue 34).
    var editSeq: Int64
    var acknowledgedEditSeq: Int64
    /// The ccid of our change whose acknowledgement made the ghost's version (`Schema` v12),
    /// when `authored`: a server restored from a backup may hold a version of the same number
    /// and data made by another change, in another history; its `e` answer names that change.
    var authoredCCID: String?
    /// The local value is the ghost's text, byte for byte (a synced note's, mostly): the row
    /// keeps it once (`Schema` v14), `local_value` NULL and `local_is_ghost` set.
    var localIsGhost: Bool { localValue.map { exactlyEqual($0, ghostData) } ?? false }
    /// `local_value` and `local_is_ghost` as written (the texts compared once).
    var storedLocalValue: (text: String?, isGhost: Bool) {
        let isGhost = localIsGhost
        return (isGhost ? nil : localValue, isGhost)
    }

    /// The file's bytes are a save not parsed yet (`Schema` v13): the local value, its edit
    /// count and the queue are those of the save before it until the store parses it
    /// (`SyncStore.finishDeferredParse`), which every path that reads the value or writes the
    /// file from it does first (`SyncStore.parseFirst`).
    var unparsed: Bool {
        get { unparsedToken != 0 }
        set { unparsedToken = newValue ? Int64.random(in: 2...Int64.max) : 0 }
    }
    /// Nonzero while `unparsed` (`Schema` v15): drawn anew by each save left unparsed, so a
    /// parse made outside the transaction knows the bytes it parsed are still the file's
    /// without reading them again.
    private(set) var unparsedToken: Int64

    init(
        id: Int64, bucketID: Int64, key: String, ghostVersion: Int?, ghostData: String, localValue: String?,
        content: Data?, mtime: Int64, ctime: Int64, state: String, reason: String?, deletedPending: Bool,
        reloadVersion: Int?, needsReload: Bool, seenGeneration: Int64, nodeID: Int64? = nil, mode: Int64? = nil,
        atime: Int64? = nil, authored: Bool = false, editSeq: Int64 = 0, acknowledgedEditSeq: Int64 = 0,
        authoredCCID: String? = nil, unparsed: Bool = false
    ) {
        self.id = id
        self.bucketID = bucketID
        self.key = key
        self.ghostVersion = ghostVersion
        self.ghostData = ghostData
        self.localValue = localValue
        self.fileSize = content?.count
        if let content { contentSet = .some([UInt8](content)) }
        self.mtime = mtime
        self.ctime = ctime
        self.state = state
        self.reason = reason
        self.deletedPending = deletedPending
        self.reloadVersion = reloadVersion
        self.needsReload = needsReload
        self.seenGeneration = seenGeneration
        self.nodeID = nodeID ?? id
        self.mode = mode
        self.atime = atime
        self.authored = authored
        self.editSeq = editSeq
        self.acknowledgedEditSeq = acknowledgedEditSeq
        self.authoredCCID = authoredCCID
        self.unparsedToken = unparsed ? 1 : 0
    }

    init(row: Row) {
        id = row[0]
        bucketID = row[1]
        key = row[2]
        ghostVersion = row[3]
        ghostData = row[4]
        localValue = row[22] ? ghostData : row[5] as String?
        mtime = row[6]
        ctime = row[7]
        state = row[8]
        reason = row[9]
        deletedPending = row[10]
        reloadVersion = row[11]
        needsReload = row[12]
        seenGeneration = row[13]
        nodeID = row[14] ?? id
        mode = row[15]
        atime = row[16]
        authored = row[17]
        editSeq = row[18]
        acknowledgedEditSeq = row[19]
        authoredCCID = row[20]
        unparsedToken = row[21]
        fileSize = row[23]
    }

    init(_ columns: ColumnReader) throws {
        id = try columns.value(0)
        bucketID = try columns.value(1)
        key = try columns.value(2)
        ghostVersion = columns.optional(3)
        ghostData = try columns.value(4)
        localValue = try columns.value(22) ? ghostData : columns.optional(5)
        mtime = try columns.value(6)
        ctime = try columns.value(7)
        state = try columns.value(8)
        reason = columns.optional(9)
        deletedPending = try columns.value(10)
        reloadVersion = columns.optional(11)
        needsReload = try columns.value(12)
        seenGeneration = try columns.value(13)
        nodeID = columns.optional(14) ?? id
        mode = columns.optional(15)
        atime = columns.optional(16)
        authored = try columns.value(17)
        editSeq = try columns.value(18)
        acknowledgedEditSeq = try columns.value(19)
        authoredCCID = columns.optional(20)
        unparsedToken = try columns.value(21)
        fileSize = columns.optional(23)
    }

    func insert(_ db: Database) throws {
        let statement = try db.cachedStatement(
            sql: """
                INSERT INTO entity (id, bucket_id, key, ghost_version, ghost_data, local_value, mtime, ctime,
                state, reason, deleted_pending, reload_version, needs_reload, seen_generation, node_id, mode, atime, authored,
                edit_seq, acknowledged_edit_seq, authored_ccid, unparsed, local_is_ghost, file_size)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """)
        let local = storedLocalValue
        try statement.execute(
            binding: id, bucketID, key, ghostVersion, ghostData, local.text, mtime, ctime, state, reason,
            deletedPending, reloadVersion, needsReload, seenGeneration, nodeID, mode, atime, authored, editSeq,
            acknowledgedEditSeq, authoredCCID, unparsedToken, local.isGhost, fileSize)
        try writeContent(db)
    }

    /// GRDB's `save`: the row is updated, or inserted when it is not in the table yet.
    func save(_ db: Database) throws {
        do {
            try update(db)
        } catch RecordError.recordNotFound {
            try insert(db)
        }
    }

    /// Every column but `bucket_id` and `key`, which never change: SQLite rewrites the entries
    /// of every index whose columns an UPDATE assigns (and checks the bucket's foreign key),
    /// whether or not the values differ.
    func update(_ db: Database) throws {
        let statement = try db.cachedStatement(
            sql: """
                UPDATE entity SET ghost_version = ?, ghost_data = ?, local_value = ?,
                mtime = ?, ctime = ?, state = ?, reason = ?, deleted_pending = ?, reload_version = ?,
                needs_reload = ?, seen_generation = ?, node_id = ?, mode = ?, atime = ?, authored = ?, edit_seq = ?,
                acknowledged_edit_seq = ?, authored_ccid = ?, unparsed = ?, local_is_ghost = ?, file_size = ?
                WHERE id = ?
                """)
        let local = storedLocalValue
        try statement.execute(
            binding: ghostVersion, ghostData, local.text, mtime, ctime, state, reason, deletedPending,
            reloadVersion, needsReload, seenGeneration, nodeID, mode, atime, authored, editSeq, acknowledgedEditSeq,
            authoredCCID, unparsedToken, local.isGhost, fileSize, id)
        try requireUpdated(db)
        try writeContent(db)
    }

    /// Writes the bytes given since the row was read (`setContent`), if any: a write that finds
    /// them written already does it again (their content is the same).
    private func writeContent(_ db: Database) throws {
        guard case .some(let bytes) = contentSet else { return }
        if let bytes, bytes.count >= IncrementalBlob.threshold {
            // Room first, then the bytes by pieces: SQLite builds no record of them.
            let statement = try db.cachedStatement(
                sql: """
                    INSERT INTO entity_content (entity_id, bytes) VALUES (?, zeroblob(?))
                    ON CONFLICT (entity_id) DO UPDATE SET bytes = excluded.bytes
                    """)
            try statement.execute(binding: id, bytes.count)
            try IncrementalBlob.write(bytes, table: "entity_content", column: "bytes", row: id, db)
        } else if let bytes {
            let statement = try db.cachedStatement(
                sql: """
                    INSERT INTO entity_content (entity_id, bytes) VALUES (?, ?)
                    ON CONFLICT (entity_id) DO UPDATE SET bytes = excluded.bytes
                    """)
            // Bound where they are: GRDB binds the blob of a statement of few arguments without
            // copying it (`execute(binding:)` has SQLite copy it: up to 1 MiB here), and the bytes
            // outlive it.
            try bytes.withUnsafeBytes { buffer in
                let blob = buffer.baseAddress.map {
                    Data(bytesNoCopy: UnsafeMutableRawPointer(mutating: $0), count: buffer.count, deallocator: .none)
                } ?? Data()
                try statement.execute(arguments: [id, blob])
            }
        } else {
            try db.cachedStatement(sql: "DELETE FROM entity_content WHERE entity_id = ?").execute(binding: id)
        }
    }

    /// Whether the entity has a file (its bytes may be empty).
    var hasFile: Bool { fileSize != nil }

    /// The file's bytes, nil when it has none: the ones given since the row was read, else the
    /// stored ones (read now, each time: a row is mostly written without them).
    func content(_ db: Database) throws -> [UInt8]? {
        if case .some(let bytes) = contentSet { return bytes }
        guard let fileSize else { return nil }
        return try Self.storedContent(entityID: id, size: fileSize, db)
    }

    /// The stored bytes of the file of entity `entityID`, `size` bytes long.
    static func storedContent(entityID id: Int64, size: Int, _ db: Database) throws -> [UInt8] {
        if size >= IncrementalBlob.threshold {
            return try IncrementalBlob.read(table: "entity_content", column: "bytes", row: id, count: size, db)
        }
        // Copied once, from SQLite's buffer into the array.
        let rows = try Row.fetchCursor(
            db.cachedStatement(sql: "SELECT bytes FROM entity_content WHERE entity_id = ?"), arguments: [id])
        let bytes = try rows.next()?.withUnsafeData(atIndex: 0, { $0.map { [UInt8]($0) } })
        while try rows.next() != nil {}  // stepped to its end: the statement holds nothing open
        guard let bytes else {
            throw StoreError.corruptRow("entity \(id) has a file of \(size) bytes and no content")
        }
        return bytes
    }

    /// Gives the file `bytes` (nil: no file), written with the row.
    mutating func setContent(_ bytes: [UInt8]?) {
        contentSet = .some(bytes)
        fileSize = bytes?.count
    }

    /// Only what an acknowledgement changes (the ghost, its version, the state): the row's
    /// value and bytes stay as they are, unbound and uncopied, and no index is touched.
    /// `acknowledge` calls it when the local value is the new ghost's text (kept once from
    /// then on); were it not, a local value the old ghost held would move into its own column
    /// (the right of every `SET` reads the row as it was).
    func updateSyncState(_ db: Database) throws {
        let statement = try db.cachedStatement(
            sql: """
                UPDATE entity SET
                    local_value = CASE WHEN ?1 THEN NULL WHEN local_is_ghost THEN ghost_data ELSE local_value END,
                    local_is_ghost = ?1, ghost_version = ?2, ghost_data = ?3, state = ?4, reason = ?5, authored = ?6,
                    acknowledged_edit_seq = ?7, authored_ccid = ?8
                WHERE id = ?9
                """)
        try statement.execute(
            binding: localIsGhost, ghostVersion, ghostData, state, reason, authored, acknowledgedEditSeq, authoredCCID, id)
        try requireUpdated(db)
    }

    /// On a cached statement (GRDB's `delete` builds its statement on every call): every
    /// acknowledged removal deletes its row. True if there was one to delete.
    @discardableResult
    func delete(_ db: Database) throws -> Bool {
        try db.cachedStatement(sql: "DELETE FROM entity WHERE id = ?").execute(binding: id)
        return db.changesCount > 0
    }

    private func requireUpdated(_ db: Database) throws {
        guard db.changesCount > 0 else {
            throw RecordError.recordNotFound(databaseTableName: Self.databaseTableName, key: ["id": id.databaseValue])
        }
    }

    func encode(to container: inout PersistenceContainer) {
        container["id"] = id
        container["bucket_id"] = bucketID
        container["key"] = key
        container["ghost_version"] = ghostVersion
        container["ghost_data"] = ghostData
        let local = storedLocalValue
        container["local_value"] = local.text
        container["local_is_ghost"] = local.isGhost
        container["mtime"] = mtime
        container["ctime"] = ctime
        container["state"] = state
        container["reason"] = reason
        container["deleted_pending"] = deletedPending
        container["reload_version"] = reloadVersion
        container["needs_reload"] = needsReload
        container["seen_generation"] = seenGeneration
        container["node_id"] = nodeID
        container["mode"] = mode
        container["atime"] = atime
        container["authored"] = authored
        container["edit_seq"] = editSeq
        container["acknowledged_edit_seq"] = acknowledgedEditSeq
        container["authored_ccid"] = authoredCCID
        container["unparsed"] = unparsedToken
        container["file_size"] = fileSize
    }

    /// A fresh row for a key this store has not seen; `id`: one reserved for it already (else a
    /// new one is allocated).
    static func new(bucketID: Int64, key: String, now: Int64, id: Int64? = nil, _ db: Database) throws -> EntityRow {
        EntityRow(
            id: try id ?? Schema.allocateNodeID(db), bucketID: bucketID, key: key, ghostVersion: nil,
            ghostData: "{}", localValue: nil, content: nil, mtime: now, ctime: now,
            state: EntityState.synced.description, reason: nil, deletedPending: false,
            reloadVersion: nil, needsReload: false, seenGeneration: 0)
    }

    static func find(bucketID: Int64, key: String, _ db: Database) throws -> EntityRow? {
        let statement = try db.cachedStatement(sql: "SELECT * FROM entity WHERE bucket_id = ? AND key = ?")
        return try ColumnReader.first(statement, binding: bucketID, key, decode: EntityRow.init)
    }

    func ghost() throws -> JSONObject { try StoredJSON.object(ghostData, column: "ghost_data") }

    func local() throws -> JSONObject? {
        try localValue.map { try StoredJSON.object($0, column: "local_value") }
    }

    mutating func setGhost(_ object: JSONObject, version: Int?) {
        ghostData = StoredJSON.text(object)
        ghostVersion = version
    }

    /// Shows `value` in the file, rendered in the bucket's file format (a remote change was
    /// applied). Times change only with the bytes: an acknowledgement or a catch-up that renders
    /// the same file leaves it as backup tools last saw it (they key on mtime and ctime).
    mutating func render(_ value: JSONObject, in format: any EntityFileFormat, now: Int64, _ db: Database) throws {
        let both = format.renderWithCompactJSON(value)
        localValue = both.compact
        let rendered = both.file
        // The sizes first: bytes of another length differ without reading the stored ones.
        if try rendered?.count != fileSize || content(db) != rendered {
            setContent(rendered)
            mtime = now
            ctime = now
        }
    }

    /// The file holds bytes that are not a JSON object (kept exactly, not sent): a change from
    /// the server never removes them.
    var holdsInvalidBytes: Bool {
        hasFile && !deletedPending && state == EntityState.invalid.description
    }

    /// Whether the file holds a value the server has not acknowledged (an edit, or a change in
    /// flight) made by a save here the server has not acknowledged either: what a removal from
    /// elsewhere must not take. `open`: the row's open change.
    func hasLocalEdit(open: ChangeRow?) throws -> Bool {
        guard holdsUnacknowledgedEdit else { return false }
        guard !deletedPending, let local = try local() else { return false }
        return local != (try ghost()) || open != nil || ghostVersion == nil
    }

    /// Missing from the re-index of `bucket` in progress, and asked for at our version
    /// (`SyncStore.applyIndexPage`): the answer says whether the server removed it or lost it.
    func awaitsVerification(in bucket: BucketRow) -> Bool {
        needsReload && reloadVersion != nil && reloadVersion == ghostVersion && seenGeneration < bucket.indexGeneration
    }

    /// Whether the server's version of our ghost's number and data, made by the change `ccid`
    /// (nil: the server does not say), may be the one our change made. The same number and data
    /// in another history of a restored server (the note made again as it once was) were made by
    /// another change.
    func mayBeOurs(versionMadeBy ccid: String?) -> Bool {
        guard authored, let ours = authoredCCID, let ccid else { return true }
        return ours == ccid
    }

    /// A save here gave the entity a value the server has not acknowledged yet (`editSeq`).
    var holdsUnacknowledgedEdit: Bool { editSeq > acknowledgedEditSeq }

    /// The acknowledgement of `change`: the saves its value was computed from are the server's.
    mutating func acknowledgeEdits(of change: ChangeRow) {
        acknowledgedEditSeq = max(acknowledgedEditSeq, change.editSeq)
    }

    func hasLocalEdit(_ db: Database) throws -> Bool {
        try hasLocalEdit(open: ChangeRow.open(entityID: id, db))
    }

    /// The file is gone (deleted locally while the row waits for the server). A file made under
    /// the same key later is a new file, with a number no descriptor still holds; `SyncStore.save`
    /// gives it one then, as most removed files are never made again.
    mutating func removeFile(now: Int64) {
        setContent(nil)
        localValue = nil
        ctime = now
        mode = nil
        atime = nil
    }

    /// The entity's file as a directory listing shows it (`EntityInfo.directoryEntry`, without
    /// decoding anything).
    var directoryEntry: DirectoryEntry {
        DirectoryEntry(id: nodeID, name: .entity(key: key), size: fileSize ?? 0, mtime: mtime, ctime: ctime, mode: mode, atime: atime)
    }

    /// `value`: the local value when the caller has it parsed already (a save just parsed the bytes).
    /// `decodingValues` false: the ghost and value are left out (`[:]`, nil), not decoded (a save
    /// whose bytes are parsed later: decoding the value before them would cost as much).
    func info(bucket: String, value: JSONObject? = nil, decodingValues: Bool = true, _ db: Database) throws -> EntityInfo {
        EntityInfo(
            id: id, nodeID: nodeID, bucket: bucket, key: key, version: ghostVersion, ghost: decodingValues ? try ghost() : [:],
            value: decodingValues ? try value ?? local() : nil, content: try content(db) ?? [], mtime: mtime,
            ctime: ctime,
            state: Self.state(text: state, unparsed: unparsed), reason: reason, deletedPending: deletedPending,
            mode: mode, atime: atime)
    }

    /// The state the store's readers see from a row's columns.
    static func state(text: String, unparsed: Bool) -> EntityState {
        // Bytes not parsed yet are a save on its way to the server, whatever the value before them is.
        unparsed ? .pending : EntityState(text: text) ?? .conflict
    }
}

struct ChangeRow: FetchableRecord, MutablePersistableRecord {
    static let databaseTableName = "pending_change"
    var seq: Int64?
    var entityID: Int64
    var ccid: String
    var sv: Int?
    var op: String
    var diff: String?
    var fullData: String?
    var state: String
    var created: Int64
    /// The entity's `editSeq` when this change's value was computed from its local value.
    var editSeq: Int64

    init(
        seq: Int64? = nil, entityID: Int64, ccid: String, sv: Int?, op: String, diff: String?, fullData: String?,
        state: String, created: Int64, editSeq: Int64 = 0
    ) {
        self.seq = seq
        self.entityID = entityID
        self.ccid = ccid
        self.sv = sv
        self.op = op
        self.diff = diff
        self.fullData = fullData
        self.state = state
        self.created = created
        self.editSeq = editSeq
    }

    init(row: Row) {
        seq = row[0]
        entityID = row[1]
        ccid = row[2]
        sv = row[3]
        op = row[4]
        diff = row[5]
        fullData = row[6]
        state = row[7]
        created = row[8]
        editSeq = row[9]
    }

    init(_ columns: ColumnReader) throws {
        seq = columns.optional(0)
        entityID = try columns.value(1)
        ccid = try columns.value(2)
        sv = columns.optional(3)
        op = try columns.value(4)
        diff = columns.optional(5)
        fullData = columns.optional(6)
        state = try columns.value(7)
        created = try columns.value(8)
        editSeq = try columns.value(9)
    }

    /// Inserted (it gets its `seq`), or updated once it has one; what GRDB's `save` does, on
    /// cached statements (a change is written on every save and every acknowledgement).
    mutating func save(_ db: Database) throws {
        if seq != nil {
            do {
                return try update(db)
            } catch RecordError.recordNotFound {}
        }
        try insert(db)
    }

    mutating func insert(_ db: Database) throws {
        let statement = try db.cachedStatement(
            sql: """
                INSERT INTO pending_change (seq, entity_id, ccid, sv, op, diff, full_data, state, created, edit_seq)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """)
        try statement.execute(binding: seq, entityID, ccid, sv, op, diff, fullData, state, created, editSeq)
        seq = db.lastInsertedRowID
    }

    func update(_ db: Database) throws {
        guard let seq else {
            throw RecordError.recordNotFound(databaseTableName: Self.databaseTableName, key: ["seq": DatabaseValue.null])
        }
        let statement = try db.cachedStatement(
            sql: """
                UPDATE pending_change SET entity_id = ?, ccid = ?, sv = ?, op = ?, diff = ?, full_data = ?, state = ?,
                created = ?, edit_seq = ? WHERE seq = ?
                """)
        try statement.execute(binding: entityID, ccid, sv, op, diff, fullData, state, created, editSeq, seq)
        guard db.changesCount > 0 else {
            throw RecordError.recordNotFound(databaseTableName: Self.databaseTableName, key: ["seq": seq.databaseValue])
        }
    }

    @discardableResult
    func delete(_ db: Database) throws -> Bool {
        guard let seq else { return false }
        try db.cachedStatement(sql: "DELETE FROM pending_change WHERE seq = ?").execute(binding: seq)
        return db.changesCount > 0
    }

    func encode(to container: inout PersistenceContainer) {
        container["seq"] = seq
        container["entity_id"] = entityID
        container["ccid"] = ccid
        container["sv"] = sv
        container["op"] = op
        container["diff"] = diff
        container["full_data"] = fullData
        container["state"] = state
        container["created"] = created
        container["edit_seq"] = editSeq
    }

    mutating func didInsert(_ inserted: InsertionSuccess) {
        seq = inserted.rowID
    }

    /// Records a queued change as written to a connection (a change past that stays as it is).
    static func markSent(ccid: String, _ db: Database) throws {
        try db.cachedStatement(sql: "UPDATE pending_change SET state = 'sent' WHERE ccid = ? AND state = 'queued'")
            .execute(binding: ccid)
    }

    /// The entity's open change: queued, sent, or `applied` (a 409 waiting for its echo).
    /// Rejected changes are closed; at most one change is open per entity.
    static func open(entityID: Int64, _ db: Database) throws -> ChangeRow? {
        // ORs, not `IN (...)`: SQLite builds a temporary b-tree of an IN list at each run, and
        // this runs for every save and every acknowledgement.
        let statement = try db.cachedStatement(sql: """
            SELECT * FROM pending_change
            WHERE entity_id = ? AND (state = 'queued' OR state = 'sent' OR state = 'applied') ORDER BY seq LIMIT 1
            """)
        return try ColumnReader.first(statement, binding: entityID, decode: ChangeRow.init)
    }

    /// `parsed`: the diff when the caller holds it as a value already (it just computed it), with
    /// `basis`, what it was computed from.
    /// `decodingAtMost`: a change whose stored diff and whole object take more bytes is not
    /// decoded (`OutgoingChange.leftInStore`).
    func outgoing(
        bucket: String, key: String, diff parsed: JSONObject? = nil, basis: SentChanges.Sent? = nil, decodingAtMost limit: Int = .max
    ) throws -> OutgoingChange {
        let storedBytes = (diff?.utf8.count ?? 0) + (fullData?.utf8.count ?? 0)
        let leftInStore = op != "-" && storedBytes > limit
        let operation: OutgoingOperation
        if op == "-" {
            operation = .remove
        } else if leftInStore {
            operation = .modify(diff: [:])
        } else {
            operation = .modify(diff: try parsed ?? StoredJSON.object(diff ?? "{}", column: "pending_change.diff"))
        }
        return OutgoingChange(
            bucket: bucket, key: key, entityID: entityID, ccid: ccid, sourceVersion: sv, operation: operation,
            fullData: leftInStore ? nil : try fullData.map { try StoredJSON.object($0, column: "pending_change.full_data") },
            state: ChangeState(text: state) ?? .queued, basis: NotCompared(leftInStore ? nil : basis),
            storedBytes: NotCompared(storedBytes), diffLeftInStore: NotCompared(leftInStore))
    }
}

struct LocalFileRow: FetchableRecord, PersistableRecord {
    static let databaseTableName = "local_file"
    var id: Int64
    var bucketID: Int64
    var name: String
    var content: Data
    var mtime: Int64
    var ctime: Int64
    var mode: Int64?
    var atime: Int64?
    /// Set when the bytes are in `local_chunk` (`content` is then empty), with their length.
    var contentID: Int64?
    var size: Int64?

    init(
        id: Int64, bucketID: Int64, name: String, content: Data, mtime: Int64, ctime: Int64, mode: Int64? = nil,
        atime: Int64? = nil
    ) {
        self.id = id
        self.bucketID = bucketID
        self.name = name
        self.content = content
        self.mtime = mtime
        self.ctime = ctime
        self.mode = mode
        self.atime = atime
    }

    init(row: Row) {
        id = row[0]
        bucketID = row[1]
        name = row[2]
        content = row[3]
        mtime = row[4]
        ctime = row[5]
        mode = row[6]
        atime = row[7]
        contentID = row[8]
        size = row[9]
    }

    func encode(to container: inout PersistenceContainer) {
        container["id"] = id
        container["bucket_id"] = bucketID
        container["name"] = name
        container["content"] = content
        container["mtime"] = mtime
        container["ctime"] = ctime
        container["mode"] = mode
        container["atime"] = atime
        container["content_id"] = contentID
        container["size"] = size
    }

    /// The file's length, wherever its bytes are.
    var byteCount: Int { size.map(Int.init) ?? content.count }

    static func find(bucketID: Int64, name: String, _ db: Database) throws -> LocalFileRow? {
        let statement = try db.cachedStatement(sql: "SELECT * FROM local_file WHERE bucket_id = ? AND name = ?")
        return try LocalFileRow.fetchOne(statement.bound(bucketID, name))
    }

    /// The file with its bytes (read from its chunks when it has them: for small files and tests).
    func info(bucket: String, _ db: Database) throws -> LocalFileInfo {
        let bytes = try contentID.map { try SyncStore.assemble(LocalContent(id: $0, size: byteCount), db) } ?? [UInt8](content)
        return LocalFileInfo(id: id, bucket: bucket, name: name, content: bytes, mtime: mtime, ctime: ctime)
    }

    /// The file as a directory listing shows it.
    var directoryEntry: DirectoryEntry {
        DirectoryEntry(id: id, name: .localFile(name: name), size: byteCount, mtime: mtime, ctime: ctime, mode: mode, atime: atime)
    }
}
