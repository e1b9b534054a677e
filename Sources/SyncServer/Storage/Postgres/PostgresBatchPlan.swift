import Foundation
import JSONDiff
import SyncProtocol

/// A client's change in a bucket, as dedup knows it (clientid+ccid).
struct ClientChangeID: Hashable, Sendable {
    var bucketID: Int64
    var clientID: String
    var ccid: String
}

/// An entity of a bucket.
struct BucketEntity: Hashable, Sendable {
    var bucketID: Int64
    var key: String
}

/// What a batch's changes depend on in the database, read in a few queries under the cv lock
/// (`PostgresBatchQueries.read`): their ccids' fate, their entities, and the older versions a
/// stale sv asks for.
struct PostgresBatchReads: Sendable {
    var applied: Set<ClientChangeID> = []
    var refused: [ClientChangeID: (fingerprint: Data, code: Int)] = [:]
    /// Current version and data (nil: deleted) of each stored entity the batch touches.
    var entities: [BucketEntity: (version: Int, data: String?)] = [:]
    /// Kept versions the batch's stale svs name.
    var versions: [BucketEntity: [Int: String]] = [:]
}

/// One batch's changes decided in memory, in queue order, as the SQLite store's
/// `applyInTransaction` decides them one at a time: each sees the effects of the ones before
/// it (an entity's next version, a ccid applied or refused earlier in the batch). What they
/// change is collected as rows that `PostgresBatchQueries.write` stores with a few multi-row
/// statements, instead of ten round trips per change.
struct PostgresBatchPlan {
    /// The newest cv given out (the counter's value once the batch is stored).
    private(set) var lastCV: Int64
    private var applied: Set<ClientChangeID>
    private var refused: [ClientChangeID: (fingerprint: Data, code: Int)]
    private var entities: [BucketEntity: EntityRecord]
    private var versions: [BucketEntity: [Int: StoredData]]
    /// Versions at or below this are dropped from an entity's history.
    private var historyFloor: [BucketEntity: Int] = [:]

    // What the batch writes.
    private(set) var entityWrites: [BucketEntity: (version: Int, data: String?)] = [:]
    private(set) var versionWrites: [(entity: BucketEntity, version: Int, data: String)] = []
    private(set) var changeWrites: [(bucketID: Int64, change: StoredChange)] = []
    private(set) var refusalWrites: [ClientChangeID: (cv: Int64, fingerprint: Data, code: Int)] = [:]
    /// Changes added per bucket, with the limits the bucket's changes came with.
    private(set) var bucketCounts: [Int64: (added: Int64, limits: ChangeLimits)] = [:]

    /// Data as read (decoded on first use) or as a change of this batch made it.
    private enum StoredData {
        case text(String)
        case object(JSONObject)
    }

    private struct EntityRecord {
        var version: Int
        var data: StoredData?
    }

    init(lastCV: Int64, reads: PostgresBatchReads) {
        self.lastCV = lastCV
        applied = reads.applied
        refused = reads.refused
        entities = reads.entities.mapValues { EntityRecord(version: $0.version, data: $0.data.map(StoredData.text)) }
        versions = reads.versions.mapValues { $0.mapValues(StoredData.text) }
        // A stale sv may name the stored current version once this batch moved past it.
        for (key, stored) in reads.entities {
            if let data = stored.data { versions[key, default: [:]][stored.version] = .text(data) }
        }
    }

    /// History versions the batch may need from the database: each stale sv below its
    /// entity's stored version.
    static func versionsToRead(_ batch: [PendingChange], entities: [BucketEntity: (version: Int, data: String?)]) -> [BucketEntity: Set<Int>] {
        var wanted: [BucketEntity: Set<Int>] = [:]
        for pending in batch {
            let key = BucketEntity(bucketID: pending.bucket.id, key: pending.change.id)
            guard let sourceVersion = pending.change.sourceVersion, sourceVersion > 0,
                  let stored = entities[key], sourceVersion < stored.version
            else { continue }
            wanted[key, default: []].insert(sourceVersion)
        }
        return wanted
    }

    /// Decides one change (the steps of `ServerStore.applyInTransaction`) and records its writes.
    /// A thrown error (stored data that does not decode) fails this change alone.
    mutating func apply(_ pending: PendingChange) throws -> ChangeVerdict<StoredChange> {
        let change = pending.change
        let ccid = ClientChangeID(bucketID: pending.bucket.id, clientID: pending.clientID, ccid: change.ccid)
        if applied.contains(ccid) { return .refused(.duplicate) }
        if let remembered = refused[ccid], remembered.fingerprint == RefusedCCIDs.fingerprint(change),
           let code = ChangeErrorCode(rawValue: remembered.code) {
            return .refused(code)
        }
        let verdict = try resolve(pending)
        switch verdict {
        case .accepted(let stored):
            applied.insert(ccid)
            changeWrites.append((pending.bucket.id, stored))
            bucketCounts[pending.bucket.id, default: (0, pending.limits)].added += 1
        case .refused(let code):
            if RefusedCCIDs.isRemembered(code) {
                let fingerprint = RefusedCCIDs.fingerprint(change)
                refused[ccid] = (fingerprint, code.rawValue)
                refusalWrites[ccid] = (lastCV, fingerprint, code.rawValue)
            }
        }
        return verdict
    }

    private mutating func resolve(_ pending: PendingChange) throws -> ChangeVerdict<StoredChange> {
        let change = pending.change
        let key = BucketEntity(bucketID: pending.bucket.id, key: change.id)
        let current = try currentState(key)
        let floor = historyFloor[key] ?? 0
        let resolution = try ChangeResolver.resolve(change, current: current) { version in
            guard version > floor, let data = versions[key]?[version] else { return nil }
            return try Self.object(data, what: "entity \(change.id).\(version)")
        }
        let resolved: ChangeResolution
        switch resolution {
        case .refused(let code): return .refused(code)
        case .accepted(let value): resolved = value
        }
        let stored: StoredChange
        switch resolved {
        case .modify(let data, let diff, let sourceVersion, let endVersion):
            let dataText = JSONValue.object(data).compactRendered()
            if dataText.utf8.count > pending.limits.maxDocumentSize { return .refused(.documentTooLarge) }
            guard SendableNesting.fits(data: data, diff: diff) else { return .refused(.invalidRequest) }
            lastCV += 1
            entities[key] = EntityRecord(version: endVersion, data: .object(data))
            entityWrites[key] = (endVersion, dataText)
            versions[key, default: [:]][endVersion] = .object(data)
            versionWrites.append((key, endVersion, dataText))
            if endVersion > pending.limits.historyPerEntity {
                historyFloor[key] = max(floor, endVersion - pending.limits.historyPerEntity)
            }
            stored = StoredChange(
                cv: lastCV, key: change.id, clientID: pending.clientID, ccid: change.ccid, operation: .modify,
                diff: diff, sourceVersion: sourceVersion, endVersion: endVersion
            )
        case .remove(let sourceVersion, let endVersion):
            lastCV += 1
            entities[key] = EntityRecord(version: endVersion, data: nil)
            entityWrites[key] = (endVersion, nil)
            stored = StoredChange(
                cv: lastCV, key: change.id, clientID: pending.clientID, ccid: change.ccid, operation: .remove,
                diff: nil, sourceVersion: sourceVersion, endVersion: endVersion
            )
        }
        return .accepted(stored)
    }

    /// The history floor of every entity whose history this batch trims.
    var historyFloors: [BucketEntity: Int] { historyFloor }

    /// Kept versions to insert: those of this batch above their entity's history floor.
    var keptVersionWrites: [(entity: BucketEntity, version: Int, data: String)] {
        versionWrites.filter { $0.version > (historyFloor[$0.entity] ?? 0) }
    }

    private mutating func currentState(_ key: BucketEntity) throws -> EntityState? {
        guard var record = entities[key] else { return nil }
        let object = try record.data.map { try Self.object($0, what: "entity \(key.key)") }
        if let object { record.data = .object(object) }
        entities[key] = record
        return EntityState(version: record.version, data: object)
    }

    private static func object(_ data: StoredData, what: String) throws -> JSONObject {
        switch data {
        case .text(let text): return try ServerStore.decodeObject(text, what: what)
        case .object(let object): return object
        }
    }
}
