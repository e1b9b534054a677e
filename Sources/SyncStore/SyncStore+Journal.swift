import Foundation
import GRDB
import SQLiteStatements

/// An edit from the save journal, applied.
public struct AppliedEdit: Sendable {
    public let edit: JournaledEdit
    /// The changes to send now, as `saveLocal`, `deleteLocal` and `rename` return them.
    public let readyToSend: [OutgoingChange]
    /// Set when saved bytes are not a JSON object (kept, marked invalid, not sent).
    public let parseError: String?
}

/// What the store made of a batch of journaled edits.
public struct AppliedEdits: Sendable {
    /// Each edit applied now, in the journal's order.
    public var applied: [AppliedEdit] = []
    /// Edits the store refused (the bucket is gone; a removal of a file that is gone already):
    /// dropped, with the reason.
    public var refused: [(edit: JournaledEdit, reason: StoreError)] = []
    /// Entities whose saved bytes went in unparsed (`parsingLaterFrom`), for
    /// `finishDeferredParse`.
    public var parsedLater: [(bucket: String, key: String)] = []
}

extension SyncStore {
    /// The sequence number of the last journaled edit the store has (0: none yet).
    public func appliedJournalSequence() throws(StoreError) -> Int64 {
        try read { db in try Self.appliedJournalSequence(db) }
    }

    /// Applies `edits` (in order, oldest first) as `saveLocal`, `writeLocalFile`, `deleteLocal`,
    /// `removeLocalFile` and `rename` apply them, at the time each was made, in one `.deferred`
    /// transaction that also records the last one's sequence number. Edits at or below the
    /// recorded number are skipped: the store has them, and what came after them (a rename, a
    /// newer save) must not be undone by applying them again. An edit the store refuses is
    /// dropped and reported, not retried; any other failure (a full disk) applies none of them,
    /// for the caller to try again.
    ///
    /// `parsingLaterFrom`: saves of entity files of this many bytes or more go in unparsed
    /// (`save`), listed in `AppliedEdits.parsedLater`.
    public func applyJournaledEdits(_ edits: [JournaledEdit], parsingLaterFrom: Int? = nil) throws(StoreError) -> AppliedEdits {
        let outcome = try write(.deferred) { db in
            var outcome = AppliedEdits()
            let appliedThrough = try Self.appliedJournalSequence(db)
            var buckets: [String: BucketRow] = [:]
            let pending = edits.filter { $0.sequence > appliedThrough }
            var index = 0
            while index < pending.count {
                let edit = pending[index]
                index += 1
                // Every refusal comes before the edit writes anything (the bucket is looked up
                // first, a removal or rename finds its file, and a rename checks its size, before
                // it changes a row), so a refused edit leaves nothing to roll back and needs no
                // savepoint of its own.
                do {
                    let bucket = try buckets[edit.bucket] ?? BucketRow.named(edit.bucket, db)
                    buckets[edit.bucket] = bucket
                    if index < pending.count,
                        let saved = try Self.applyEditorsSave(edit, then: pending[index], bucket: bucket, parsingLaterFrom: parsingLaterFrom, db)
                    {
                        outcome.applied.append(AppliedEdit(edit: edit, readyToSend: [], parseError: nil))
                        outcome.applied.append(AppliedEdit(edit: pending[index], readyToSend: saved.changes, parseError: nil))
                        if saved.parsedLater { outcome.parsedLater.append((edit.bucket, saved.key)) }
                        index += 1
                        continue
                    }
                    switch (edit.edit, edit.file) {
                    case (.save(let bytes), .entity(let key)):
                        let moved = edit.nodeID.map { MovedFile(nodeID: $0, mode: nil, atime: nil) }
                        let result = try Self.save(
                            .bytes(bytes), key: key, bucket: bucket, now: edit.time, moved: moved, reservedID: edit.nodeID,
                            parsingLaterFrom: parsingLaterFrom, db)
                        if result.parsedLater { outcome.parsedLater.append((edit.bucket, key)) }
                        outcome.applied.append(
                            AppliedEdit(edit: edit, readyToSend: result.readyToSend.map { [$0] } ?? [], parseError: result.parseError))
                    case (.save(let bytes), .localFile(let name)):
                        _ = try Self.putLocalFile(
                            bucketID: bucket.id, name: name, content: Data(bytes), mtime: edit.time, now: edit.time,
                            newID: edit.nodeID, db)
                        outcome.applied.append(AppliedEdit(edit: edit, readyToSend: [], parseError: nil))
                    case (.remove, .entity(let key)):
                        let change = try Self.delete(key: key, bucket: bucket, now: edit.time, db)
                        outcome.applied.append(AppliedEdit(edit: edit, readyToSend: change.map { [$0] } ?? [], parseError: nil))
                    case (.remove, .localFile(let name)):
                        try Self.removeLocalFile(name, bucket: bucket, db)
                        outcome.applied.append(AppliedEdit(edit: edit, readyToSend: [], parseError: nil))
                    case (.rename(let destination), let source):
                        let renamed = try Self.rename(
                            bucket: bucket, from: source, to: destination, now: edit.time, parsingLaterFrom: parsingLaterFrom, db)
                        if renamed.parsedLater, case .entity(let key) = destination { outcome.parsedLater.append((edit.bucket, key)) }
                        outcome.applied.append(AppliedEdit(edit: edit, readyToSend: renamed.changes, parseError: nil))
                    }
                } catch let error as StoreError where error.isRefusal {
                    outcome.refused.append((edit, error))
                }
            }
            if let last = edits.last, last.sequence > appliedThrough {
                try db.cachedStatement(sql: "UPDATE save_journal SET applied_through = ?").execute(binding: last.sequence)
            }
            return outcome
        }
        if !outcome.parsedLater.isEmpty { mayHaveUnparsed.withLock { $0 = true } }
        return outcome
    }

    /// An editor's save, a new scratch file written and then renamed over an entity's file, as
    /// the two edits would leave it (the entity's new bytes under the scratch file's number and
    /// modification time), without writing the scratch file's row only to remove it again.
    /// Returns the changes to send, or nil when `save` and `rename` are not such a pair (the
    /// caller applies them one by one): a scratch file the store has already keeps its own
    /// number and attributes, and one too large for an entity stays a local file.
    static func applyEditorsSave(
        _ save: JournaledEdit, then rename: JournaledEdit, bucket: BucketRow, parsingLaterFrom: Int?, _ db: Database
    ) throws -> (changes: [OutgoingChange], key: String, parsedLater: Bool)? {
        guard case .save(let bytes) = save.edit, case .localFile(let name) = save.file, let nodeID = save.nodeID,
            case .rename(to: .entity(let key)) = rename.edit, rename.file == save.file, rename.bucket == save.bucket,
            bytes.count <= entityFileLimit, try LocalFileRow.find(bucketID: bucket.id, name: name, db) == nil
        else { return nil }
        let saved = try Self.save(
            .bytes(bytes), key: key, bucket: bucket, now: rename.time, mtime: save.time,
            moved: MovedFile(nodeID: nodeID, mode: nil, atime: nil), parsingLaterFrom: parsingLaterFrom, db)
        return (saved.readyToSend.map { [$0] } ?? [], key, saved.parsedLater)
    }

    static func appliedJournalSequence(_ db: Database) throws -> Int64 {
        try Int64.fetchOne(db.cachedStatement(sql: "SELECT applied_through FROM save_journal")) ?? 0
    }
}

extension StoreError {
    /// An edit that can never be applied, however often it is tried.
    var isRefusal: Bool {
        switch self {
        case .unknownBucket, .unknownEntity, .unknownLocalFile, .tooLarge: return true
        default: return false
        }
    }
}
