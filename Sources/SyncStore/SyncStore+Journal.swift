import GRDB

/// What the store made of a batch of journaled saves.
public struct AppliedSaves: Sendable {
    /// Each save applied now, in the journal's order, with what `saveLocal` would have returned.
    public var applied: [(save: JournaledSave, result: SaveResult)] = []
    /// Saves the store refused (their bucket is gone): dropped, with the reason.
    public var refused: [(save: JournaledSave, reason: StoreError)] = []
}

extension SyncStore {
    /// The sequence number of the last journaled save the store has (0: none yet).
    public func appliedJournalSequence() throws(StoreError) -> Int64 {
        try read { db in try Self.appliedJournalSequence(db) }
    }

    /// Applies `saves` (in order, oldest first) as `saveLocal` applies a save of bytes, at the
    /// time each was made, in one `.deferred` transaction that also records the last one's
    /// sequence number. Saves at or below the recorded number are skipped: the store has them,
    /// and what came after them (a rename, a removal) must not be undone by applying them again.
    /// A save the store refuses (its bucket is gone) is dropped and reported, not retried; any
    /// other failure (a full disk) applies none of them, for the caller to try again.
    public func applyJournaledSaves(_ saves: [JournaledSave]) throws(StoreError) -> AppliedSaves {
        try write(.deferred) { db in
            var outcome = AppliedSaves()
            let appliedThrough = try Self.appliedJournalSequence(db)
            var buckets: [String: BucketRow] = [:]
            for save in saves where save.sequence > appliedThrough {
                do {
                    try db.inSavepoint {
                        let bucket = try buckets[save.bucket] ?? BucketRow.named(save.bucket, db)
                        buckets[save.bucket] = bucket
                        let moved = save.nodeID.map { MovedFile(nodeID: $0, mode: nil, atime: nil) }
                        let result = try Self.save(
                            .bytes(save.bytes), key: save.key, bucket: bucket, now: save.time, moved: moved,
                            reservedID: save.nodeID, db)
                        outcome.applied.append((save, result))
                        return .commit
                    }
                } catch let error as StoreError where error.isRefusal {
                    outcome.refused.append((save, error))
                }
            }
            if let last = saves.last, last.sequence > appliedThrough {
                try db.execute(sql: "UPDATE save_journal SET applied_through = ?", arguments: [last.sequence])
            }
            return outcome
        }
    }

    static func appliedJournalSequence(_ db: Database) throws -> Int64 {
        try Int64.fetchOne(db, sql: "SELECT applied_through FROM save_journal") ?? 0
    }
}

extension StoreError {
    /// A save that can never be applied, however often it is tried.
    var isRefusal: Bool {
        switch self {
        case .unknownBucket: return true
        default: return false
        }
    }
}
