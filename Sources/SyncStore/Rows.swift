import Foundation
import GRDB
import JSONDiff

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

struct BucketRow: Codable, FetchableRecord, PersistableRecord {
    static let databaseTableName = "bucket"
    var id: Int64
    var name: String
    var cv: String?
    var indexCV: String?
    var indexGeneration: Int64
    var ctime: Int64

    enum CodingKeys: String, CodingKey {
        case id, name, cv, ctime
        case indexCV = "index_cv"
        case indexGeneration = "index_generation"
    }

    var info: BucketInfo { BucketInfo(id: id, name: name, cv: cv, ctime: ctime) }

    static func named(_ name: String, _ db: Database) throws -> BucketRow {
        // Cached statements here and below: these lookups run for every entity of a sync.
        let statement = try db.cachedStatement(sql: "SELECT * FROM bucket WHERE name = ?")
        guard let row = try BucketRow.fetchOne(statement, arguments: [name]) else {
            throw StoreError.unknownBucket(name)
        }
        return row
    }
}

struct EntityRow: Codable, FetchableRecord, PersistableRecord {
    static let databaseTableName = "entity"
    var id: Int64
    var bucketID: Int64
    var key: String
    var ghostVersion: Int?
    var ghostData: String
    var localValue: String?
    var content: Data?
    var mtime: Int64
    var ctime: Int64
    var state: String
    var reason: String?
    var deletedPending: Bool
    var reloadVersion: Int?
    var needsReload: Bool
    var seenGeneration: Int64

    enum CodingKeys: String, CodingKey {
        case id, key, content, mtime, ctime, state, reason
        case bucketID = "bucket_id"
        case ghostVersion = "ghost_version"
        case ghostData = "ghost_data"
        case localValue = "local_value"
        case deletedPending = "deleted_pending"
        case reloadVersion = "reload_version"
        case needsReload = "needs_reload"
        case seenGeneration = "seen_generation"
    }

    /// A fresh row for a key this store has not seen.
    static func new(bucketID: Int64, key: String, now: Int64, _ db: Database) throws -> EntityRow {
        EntityRow(
            id: try Schema.allocateNodeID(db), bucketID: bucketID, key: key, ghostVersion: nil,
            ghostData: "{}", localValue: nil, content: nil, mtime: now, ctime: now,
            state: EntityState.synced.description, reason: nil, deletedPending: false,
            reloadVersion: nil, needsReload: false, seenGeneration: 0)
    }

    static func find(bucketID: Int64, key: String, _ db: Database) throws -> EntityRow? {
        let statement = try db.cachedStatement(sql: "SELECT * FROM entity WHERE bucket_id = ? AND key = ?")
        return try EntityRow.fetchOne(statement, arguments: [bucketID, key])
    }

    func ghost() throws -> JSONObject { try StoredJSON.object(ghostData, column: "ghost_data") }

    func local() throws -> JSONObject? {
        try localValue.map { try StoredJSON.object($0, column: "local_value") }
    }

    mutating func setGhost(_ object: JSONObject, version: Int?) {
        ghostData = StoredJSON.text(object)
        ghostVersion = version
    }

    /// Shows `value` in the file, rendered in the file format (a remote change was applied).
    mutating func render(_ value: JSONObject, now: Int64) {
        localValue = StoredJSON.text(value)
        let rendered = Data(JSONValue.object(value).prettyRendered().utf8)
        if content != rendered {
            content = rendered
            mtime = now
        }
        ctime = now
    }

    func info(bucket: String) throws -> EntityInfo {
        EntityInfo(
            id: id, bucket: bucket, key: key, version: ghostVersion, ghost: try ghost(),
            value: try local(), content: content.map { [UInt8]($0) } ?? [], mtime: mtime, ctime: ctime,
            state: EntityState(text: state) ?? .conflict, reason: reason, deletedPending: deletedPending)
    }
}

struct ChangeRow: Codable, FetchableRecord, MutablePersistableRecord {
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

    enum CodingKeys: String, CodingKey {
        case seq, ccid, sv, op, diff, state, created
        case entityID = "entity_id"
        case fullData = "full_data"
    }

    mutating func didInsert(_ inserted: InsertionSuccess) {
        seq = inserted.rowID
    }

    /// The entity's open change: queued, sent, or `applied` (a 409 waiting for its echo).
    /// Rejected changes are closed; at most one change is open per entity.
    static func open(entityID: Int64, _ db: Database) throws -> ChangeRow? {
        let statement = try db.cachedStatement(
            sql: "SELECT * FROM pending_change WHERE entity_id = ? AND state IN ('queued', 'sent', 'applied') ORDER BY seq LIMIT 1")
        return try ChangeRow.fetchOne(statement, arguments: [entityID])
    }

    func outgoing(bucket: String, key: String) throws -> OutgoingChange {
        let operation: OutgoingOperation
        if op == "-" {
            operation = .remove
        } else {
            operation = .modify(diff: try StoredJSON.object(diff ?? "{}", column: "pending_change.diff"))
        }
        return OutgoingChange(
            bucket: bucket, key: key, entityID: entityID, ccid: ccid, sourceVersion: sv, operation: operation,
            fullData: try fullData.map { try StoredJSON.object($0, column: "pending_change.full_data") },
            state: ChangeState(text: state) ?? .queued)
    }
}

struct LocalFileRow: Codable, FetchableRecord, PersistableRecord {
    static let databaseTableName = "local_file"
    var id: Int64
    var bucketID: Int64
    var name: String
    var content: Data
    var mtime: Int64
    var ctime: Int64

    enum CodingKeys: String, CodingKey {
        case id, name, content, mtime, ctime
        case bucketID = "bucket_id"
    }

    static func find(bucketID: Int64, name: String, _ db: Database) throws -> LocalFileRow? {
        let statement = try db.cachedStatement(sql: "SELECT * FROM local_file WHERE bucket_id = ? AND name = ?")
        return try LocalFileRow.fetchOne(statement, arguments: [bucketID, name])
    }

    func info(bucket: String) -> LocalFileInfo {
        LocalFileInfo(id: id, bucket: bucket, name: name, content: [UInt8](content), mtime: mtime, ctime: ctime)
    }
}
