import GRDB
import JSONDiff
import SQLiteStatements

/// What the engine does after the store recorded a change error (spec "Handling Change Errors").
public enum ChangeErrorFollowUp: Hashable, Sendable {
    /// Nothing more to send for this change (400, 413, 412 handled by a reload, unknown ccid).
    case none
    /// Send this change again (same ccid): 404 as full object, 440 with `d`, 401 after re-auth, 5xx.
    case resend(OutgoingChange)
    /// Ask for the changes since the stored cv (`cv:`), then send what is owed: 405 (the
    /// entity is rebased over the newer versions and the change resent with the same ccid),
    /// 409 (the server already applied it; its echo acknowledges it), 412 (dropped; the ghost
    /// catches up to what the server holds).
    case catchUp
    /// Authorize the channel again (new token), then resend.
    case reauthorize
}

extension SyncStore {
    /// Claims these changes for a connection, as the store holds them now, and returns what
    /// goes out: the engine writes exactly these, never its own copies. A change handed to the
    /// engine may have been superseded since: its entity removed before it was sent (the queued
    /// create of a file deleted at once goes with it), its row coalesced with a newer save, or
    /// the entity waiting for a reload. Sending the stale copy would bring a deleted file back
    /// on every device (the server creates it, and its echo finds no local change to
    /// acknowledge), or send content the store no longer means. So each change is looked up by
    /// ccid in the transaction that marks it sent: one that is gone, closed or waiting for a
    /// reload is dropped; one whose content changed goes as it stands now.
    ///
    /// Each queued change is recorded as sent (it keeps its ccid from now on); what one the
    /// store has just computed brings its entity to (`OutgoingChange.basis`) is remembered for
    /// applying its echo (`SentChanges`) when it goes unchanged.
    ///
    /// `decodingAtMost`: a change whose stored diff and whole object take more bytes comes back
    /// `leftInStore`, not decoded (it cannot go in a message of that size anyway).
    @discardableResult
    public func markSent(_ changes: [OutgoingChange], decodingAtMost limit: Int = .max) throws(StoreError) -> [OutgoingChange] {
        guard !changes.isEmpty else { return [] }
        // Synced: the changes may rest on deferred writes (a mount's close, an ack), and the
        // fsync after this commit puts those on disk too before the changes go on the wire, so a
        // power loss cannot take back what the server has.
        return try write { db in
            try changes.compactMap { change in try claim(change, decodingAtMost: limit, db) }
        }
    }

    /// `markSent` for changes known by their ccid alone: their echoes take the general path.
    /// Returns the ccids still owed (queued or sent, their entity not waiting for a reload):
    /// only those may go out.
    @discardableResult
    public func markSent(ccids: [String]) throws(StoreError) -> Set<String> {
        guard !ccids.isEmpty else { return [] }
        return try write { db in
            var owed: Set<String> = []
            for ccid in ccids where try Self.owedChange(ccid: ccid, db) != nil {
                try ChangeRow.markSent(ccid: ccid, db)
                owed.insert(ccid)
            }
            return owed
        }
    }

    /// Marks a queued change sent, remembering what it brings its entity to (`SentChanges`).
    func markSent(_ change: OutgoingChange, _ db: Database) throws {
        // Only a diff the store computed against the ghost (`reconcileQueue`) has a basis: a
        // change sent whole, a removal or one read back from the table is acknowledged the
        // general way. A change sent again after a reconnect, read back, keeps what it was
        // remembered with; one recomputed or sent whole since fails the check at its echo.
        if let sent = change.basis.value { sentChanges.remember(ccid: change.ccid, sent) }
        try ChangeRow.markSent(ccid: change.ccid, db)
    }

    /// `markSent` of one change: the change as the store holds it, marked sent, or nil when it
    /// is no longer owed.
    func claim(_ handed: OutgoingChange, decodingAtMost limit: Int, _ db: Database) throws -> OutgoingChange? {
        guard let row = try Self.owedChange(ccid: handed.ccid, db) else { return nil }
        let current: OutgoingChange
        if let basis = handed.basis.value, row.op == "M", row.fullData == nil, handed.fullData == nil,
            row.sv == handed.sourceVersion, row.sv == basis.sourceVersion, let diff = row.diff, exactlyEqual(diff, basis.diff)
        {
            // What the store just computed, unchanged: the copy in hand (its parsed diff and basis).
            current = handed
        } else {
            current = try row.outgoing(bucket: handed.bucket, key: handed.key, decodingAtMost: limit)
        }
        if row.state == "queued" { try markSent(current, db) }
        return current.marked(.sent)
    }

    /// The open change with this ccid while it is owed to the server: queued or sent, and its
    /// entity not waiting for a reload (whose answer recomputes the change).
    static func owedChange(ccid: String, _ db: Database) throws -> ChangeRow? {
        let statement = try db.cachedStatement(sql: """
            SELECT c.* FROM pending_change c JOIN entity e ON e.id = c.entity_id
            WHERE c.ccid = ? AND (c.state = 'queued' OR c.state = 'sent') AND e.needs_reload = 0
            """)
        return try ColumnReader.first(statement, binding: ccid, decode: ChangeRow.init)
    }

    /// Records a change error and decides the follow-up, per the spec's "Handling Change Errors":
    /// 400/413 stop and keep the local value (`rejected:<code>`); 401 re-authorize and resend;
    /// 404 resend as a full object (re-create); 405 reload, rebase, resend; 409 already applied,
    /// catch up via cv; 412 drop; 440 resend with the whole object in `d` (refused so too, stop
    /// and keep the local value: `rejected:440`); 5xx resend later.
    ///
    /// `wholeObjectAfter405`: the engine has had 405 for this ccid as often as it rebases (the
    /// spec's other option comes next): an edit goes whole over the current `sv`, a removal stops
    /// (`rejected:405`). Decided here, in the transaction that reads the change: a save or an
    /// unlink made between two transactions would rewrite a queued edit into a removal, and a
    /// removal that never went would be given up as "refused again and again" (issue 34's model
    /// run, seed 1256986464).
    public func reject(bucket: String, ccid: String, code: Int, wholeObjectAfter405: Bool = false) throws(StoreError) -> ChangeErrorFollowUp {
        try write { db in
            guard var change = try ChangeRow.filter(Column("ccid") == ccid).fetchOne(db),
                var entity = try EntityRow.fetchOne(db, key: change.entityID)
            else { return .none }
            defer { _ = try? entity.update(db) }
            if code == 404, change.op == "M", let live = entity.ghostVersion, live > (change.sv ?? 0) {
                // Stale: the server remembers a refusal by ccid and request, and answers a resend
                // of the same request (after a reconnect) the same, though the note was made
                // again since. The store has it live at a newer version: what is owed (the edit,
                // or a removal made here since) is computed over that one and goes as a new
                // request (a new ccid). Taken for "no note", the row was forgotten, and a removal
                // made here never went (two-node randomized test beside PostgreSQL faults, seed
                // 11312772414599283553).
                try change.delete(db)
                entity.reason = nil
                guard let owed = try Self.reconcileQueue(&entity, bucket: bucket, db) else { return .none }
                return .resend(owed)
            }
            if change.op == "M", [404, 405, 440].contains(code), try entity.deletedPending || entity.local() == nil {
                // Never this edit again, nor `{}` for "no value" (which blanks the note on every
                // device): the removal made here since goes instead (the entity is gone from the
                // server already on 404), or, when the file holds bytes that are not JSON over a
                // value that was removed, nothing until its next valid save. A 405 still catches
                // up, to bring what the server has.
                if code == 404 && entity.deletedPending {
                    try change.delete(db)
                    try entity.delete(db)
                    return .none
                }
                if let removal = try Self.giveWayToRemoval(change, &entity, bucket: bucket, db) { return .resend(removal) }
                return code == 405 && !entity.deletedPending ? .catchUp : .none
            }
            switch code {
            case 400, 413:
                try Self.refuse(&change, &entity, code: code, reason: code == 413
                    ? "server refused the change: document too large (413); kept locally"
                    : "server refused the change: invalid id or schema (400); kept locally", db)
                return .none
            case 401:
                change.state = "queued"
                try change.update(db)
                entity.reason = "server refused permission (401); re-authorizing"
                return .reauthorize
            case 404:
                // The server lost the entity: re-create it from the whole local value.
                if change.op == "-" {
                    // The removal is done (the server had it removed already).
                    try change.delete(db)
                    if entity.deletedPending || !entity.hasFile {
                        try entity.delete(db)
                        return .none
                    }
                    // Made again here after the removal went out: a new entity, sent whole (as
                    // the echo of the removal would leave it, `acknowledge`), never dropped.
                    entity.setGhost([:], version: nil)
                    entity.reason = nil
                    guard let created = try Self.reconcileQueue(&entity, bucket: bucket, db) else { return .none }
                    return .resend(created)
                }
                guard let local = try entity.local() else { return .none }  // handled above
                if !entity.holdsUnacknowledgedEdit {
                    // Issue 34: the change carries no save of this file the server has not had
                    // (what went after an acknowledgement that left our merge of concurrent
                    // changes differing from the server's): the server removed the note after
                    // it had every edit made here. Re-created from it, the note would come back
                    // on every device after a removal made by someone who saw our edits. The
                    // change goes; the catch-up brings the removal, which takes the file.
                    try change.delete(db)
                    entity.reason = "removed on the server after it had every edit made here; following the removal"
                    return .catchUp
                }
                entity.setGhost([:], version: nil)
                change.sv = nil
                change.editSeq = entity.editSeq
                change.diff = StoredJSON.text(try Merge.diff(from: [:], to: local))
                change.fullData = StoredJSON.text(local)
                change.state = "queued"
                try change.update(db)
                entity.reason = "server did not have the entity (404); re-creating it"
                return .resend(try change.outgoing(bucket: bucket, key: entity.key))
            case 405 where change.op == "-":
                if wholeObjectAfter405 {
                    // Refused as stale again and again (no newer version reaches this store): it
                    // stops, kept here with the reason, rather than loop.
                    try Self.refuse(
                        &change, &entity, code: 405,
                        reason: "the server keeps refusing this removal as made against an older version (405); the file stays removed here only", db)
                    return .none
                }
                // A removal made against an older version than the server's (the note changed
                // since, or was removed and made again by someone else): it goes again over the
                // version this store has now, and the catch-up brings the newer ones, which
                // decide (the same note's: the removal goes over them; a removal of it: done).
                change.state = "queued"
                change.sv = entity.ghostVersion
                try change.update(db)
                entity.reason = "the server has a newer version than this removal was made against (405); catching up"
                return .catchUp
            case 405 where wholeObjectAfter405:
                // The spec's other option: the whole object over the current `sv` (remote edits
                // stay in the server's history). A value is there: the branch above took the rest.
                return try Self.resendWhole(
                    &change, &entity, bucket: bucket, reason: "server rejected the source version again (405); sending the whole object", db)
            case 405:
                change.state = "queued"
                try change.update(db)
                entity.reason = "server rejected the source version (405); catching up and rebasing"
                return .catchUp
            case 409:
                change.state = "applied"
                try change.update(db)
                return .catchUp
            case 412:
                // The server has the value already: the saves it came from are the server's.
                try change.delete(db)
                entity.acknowledgeEdits(of: change)
                entity.reason = nil
                if try ChangeRow.open(entityID: entity.id, db) == nil {
                    entity.state = EntityState.synced.description
                }
                return .catchUp
            case 440:
                if change.op == "-" {
                    change.state = "queued"
                    try change.update(db)
                    return .resend(try change.outgoing(bucket: bucket, key: entity.key))
                }
                if change.fullData != nil {
                    // Refused with the whole object too: sending it again would only loop.
                    try Self.refuse(
                        &change, &entity, code: 440,
                        reason: "server could not apply the change, even with the whole object (440); kept locally", db)
                    return .none
                }
                return try Self.resendWhole(
                    &change, &entity, bucket: bucket, reason: "server could not apply the diff (440); resending with the whole object", db)
            default:
                change.state = "queued"
                try change.update(db)
                entity.reason = "server error \(code); will retry"
                return .resend(try change.outgoing(bucket: bucket, key: entity.key))
            }
        }
    }

    /// The edit goes again with the whole local value in `d` (and every save made so far in it).
    /// A value is there: `reject`'s first branch took a change without one.
    static func resendWhole(
        _ change: inout ChangeRow, _ entity: inout EntityRow, bucket: String, reason: String, _ db: Database
    ) throws -> ChangeErrorFollowUp {
        guard let local = try entity.local() else { return .none }
        change.fullData = StoredJSON.text(local)
        change.editSeq = entity.editSeq
        change.state = "queued"
        try change.update(db)
        entity.reason = reason
        return .resend(try change.outgoing(bucket: bucket, key: entity.key))
    }

    /// Drops an edit whose entity has no value to send: the removal made here since, if any, is
    /// what is owed now (returned, queued); else nothing is, until the file's next valid save.
    static func giveWayToRemoval(_ change: ChangeRow, _ entity: inout EntityRow, bucket: String, _ db: Database) throws -> OutgoingChange? {
        try change.delete(db)
        guard entity.deletedPending else { return nil }
        if entity.ghostVersion == nil, try ChangeRow.open(entityID: entity.id, db) == nil {
            // A create refused, of a file removed here since: the server never had this note,
            // and nothing is owed. The row goes, as `delete` drops a file that never reached the
            // server; kept, it was a removal waiting for nothing, and `bucketfs sync` never
            // finished (two-node randomized test, seed 7471050853922775064).
            try entity.delete(db)
            try rememberRemovalOfAKnownNote(key: entity.key, bucket: try BucketRow.named(bucket, db), db)
            return nil
        }
        return try reconcileQueue(&entity, bucket: bucket, db)
    }

    /// Stops sending a change, keeping the local value: `rejected:<code>` with `reason`, which
    /// status and the xattr show, until the next save tries again. For what the engine itself
    /// refuses to send (too large for a message, refused again after re-authorizing).
    public func refuse(ccid: String, code: Int, reason: String) throws(StoreError) {
        try write { db in
            guard var change = try ChangeRow.filter(Column("ccid") == ccid).fetchOne(db),
                var entity = try EntityRow.fetchOne(db, key: change.entityID)
            else { return }
            try Self.refuse(&change, &entity, code: code, reason: reason, db)
            try entity.update(db)
        }
    }

    /// The service refused the entity before any change of it was sent (Apptimist: the LOCK taken
    /// when the file is opened for writing is held elsewhere): `rejected:<code>` with `reason`
    /// at once, until the next save or a change from the server. Nothing stored is dropped.
    public func refuseEntity(bucket: String, key: String, code: Int, reason: String) throws(StoreError) {
        try write { db in
            let bucketRow = try BucketRow.named(bucket, db)
            guard var entity = try EntityRow.find(bucketID: bucketRow.id, key: key, db),
                entity.state != EntityState.invalid.description
            else { return }
            entity.state = EntityState.rejected(code: code).description
            entity.reason = reason
            try entity.update(db)
        }
    }

    private static func refuse(_ change: inout ChangeRow, _ entity: inout EntityRow, code: Int, reason: String, _ db: Database) throws {
        change.state = "rejected:\(code)"
        try change.update(db)
        entity.state = EntityState.rejected(code: code).description
        entity.reason = reason
    }

    /// After a cv catch-up: a change the server called a duplicate (409) whose echo did not
    /// arrive is applied already; drop it and queue whatever local edit remains (spec, 409).
    /// Returns everything owed to the server for the bucket.
    public func finishCatchUp(bucket: String) throws(StoreError) -> [OutgoingChange] {
        try write(.deferred) { db in
            let bucketRow = try BucketRow.named(bucket, db)
            let rows = try Row.fetchAll(
                db,
                sql: """
                    SELECT c.seq AS seq, e.id AS entity_id FROM pending_change c CROSS JOIN entity e ON e.id = c.entity_id
                    WHERE e.bucket_id = ? AND c.state = 'applied'
                    """,
                arguments: [bucketRow.id])
            var dropped: Set<Int64> = []
            for row in rows {
                let seq: Int64 = row["seq"]
                try db.execute(sql: "DELETE FROM pending_change WHERE seq = ?", arguments: [seq])
                dropped.insert(row["entity_id"])
            }
            // Any local edit not covered by an open change (after a 409 or 412 was dropped) is
            // queued again: the ghost is now current, so an edit the server already has diffs empty.
            // Both columns are compact JSON with sorted keys: equal text is an equal value, so
            // only rows whose text differs are decoded (not every entity of the bucket).
            let uncovered = try EntityRow.fetchAll(
                db,
                sql: """
                    SELECT * FROM entity WHERE bucket_id = ? AND (local_value IS NOT NULL OR local_is_ghost)
                    AND state NOT IN ('invalid') AND state NOT LIKE 'rejected:%'
                    AND (ghost_version IS NULL OR (NOT local_is_ghost AND local_value != ghost_data))
                    AND NOT EXISTS (SELECT 1 FROM pending_change c WHERE c.entity_id = entity.id)
                    """,
                arguments: [bucketRow.id])
            for var entity in uncovered where try entity.local() != entity.ghost() || entity.ghostVersion == nil {
                dropped.remove(entity.id)
                _ = try Self.reconcileQueue(&entity, bucket: bucket, db)
                try entity.update(db)
            }
            // A dropped duplicate whose edit the catch-up brought under another ccid (or from the
            // index) leaves nothing owed: the note is synced now, not pending for good.
            for id in dropped.sorted() {
                guard var entity = try EntityRow.fetchOne(db, key: id) else { continue }
                _ = try Self.reconcileQueue(&entity, bucket: bucket, db)
                try entity.update(db)
            }
            return try Self.owed(bucket: bucketRow, db)
        }
    }

    /// The bucket's changes that may go out now, oldest first: every one not yet acknowledged,
    /// or (`queuedOnly`) only those never sent, at most `limit` of them.
    static func owed(bucket: BucketRow, queuedOnly: Bool = false, limit: Int? = nil, _ db: Database) throws -> [OutgoingChange] {
        let states = queuedOnly ? "('queued')" : "('queued', 'sent')"
        // CROSS JOIN keeps the changes the outer loop, read in seq order: the work is the
        // changes owed (up to `limit`), not every entity of the bucket and a sort of what they owe.
        let rows = try Row.fetchAll(
            db,
            sql: """
                SELECT c.*, e.key AS entity_key FROM pending_change c CROSS JOIN entity e ON e.id = c.entity_id
                WHERE e.bucket_id = ? AND c.state IN \(states) AND e.needs_reload = 0 ORDER BY c.seq LIMIT ?
                """,
            arguments: [bucket.id, limit ?? -1])
        return try rows.map { row in try ChangeRow(row: row).outgoing(bucket: bucket.name, key: row["entity_key"]) }
    }
}
