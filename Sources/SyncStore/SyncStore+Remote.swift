import Foundation
import GRDB
import JSONDiff
import SQLiteStatements

extension SyncStore {
    /// Applies a `c` message's changes (spec "Receiving Remote Changes"): our own changes are
    /// acknowledged by ccid; others are applied when `sv` matches the ghost, and any local edit
    /// is rebased over them (jsondiff transform) so both survive. A version mismatch or an
    /// unknown entity asks for a reload; `-` removes only an entity with no local edit. The
    /// last change's cv is saved in the same transaction.
    ///
    /// `ownClientID`: the client id this store's changes go out under; a change of ours that
    /// comes back as a remote one (its acknowledgement lost to a reconnect) still makes the
    /// value ours (`EntityRow.authored`).
    public func applyRemote(bucket: String, changes: [RemoteChange], ownClientID: String? = nil) throws(StoreError) -> RemoteOutcome {
        takeLocalEditsFirst(bucket: bucket, keys: Set(changes.map(\.key)))
        // Deferred: the server's data is fetched again from the stored cv if a power loss drops it.
        let outcome = try write(.deferred) { db in
            var bucketRow = try BucketRow.named(bucket, db)
            var outcome = RemoteOutcome()
            for change in try parseFirst(keys: changes.map(\.key), bucket: bucketRow, db) { outcome.ready(change) }
            let now = Self.now()
            for change in changes {
                try Self.apply(
                    change, bucket: bucketRow, now: now, sent: sentChanges, ours: ownClientID != nil && change.clientID == ownClientID,
                    outcome: &outcome, db)
            }
            // While an index is being loaded its `current` becomes the cv at the end; changes
            // arriving meanwhile are replayed (and skipped by version) on the next catch-up.
            if bucketRow.indexCV == nil, let cv = changes.last(where: { $0.cv != nil })?.cv {
                bucketRow.cv = cv
                try bucketRow.update(db)
            }
            return outcome
        }
        publish(outcome.events)
        return outcome
    }

    /// Applies an `e` response (a reload, or data missing from an index page); `data` nil means
    /// the server answered `?`. Local edits are rebased over the difference to the new version.
    /// `madeBy`: the ccid of the change that made the version, when the server says (bucketfs's
    /// own server does, while its change log holds that change).
    public func applyEntity(
        bucket: String, key: String, version: Int, data: JSONObject?, madeBy: String? = nil
    ) throws(StoreError) -> RemoteOutcome {
        takeLocalEditsFirst(bucket: bucket, keys: [key])
        let outcome = try write(.deferred) { db in
            let bucketRow = try BucketRow.named(bucket, db)
            var outcome = RemoteOutcome()
            // Every `e` this client sends is for a row it keeps (a placeholder or a real entity);
            // no row means the entity was removed meanwhile, so a late answer must not revive it.
            guard try EntityRow.find(bucketID: bucketRow.id, key: key, db) != nil else { return outcome }
            for change in try parseFirst(keys: [key], bucket: bucketRow, db) { outcome.ready(change) }
            let now = Self.now()
            try Self.load(key: key, version: version, data: data, madeBy: madeBy, bucket: bucketRow, now: now, outcome: &outcome, db)
            try Self.recordServerLoss(outcome, bucket: bucketRow, now: now, db)
            return outcome
        }
        publish(outcome.events)
        return outcome
    }

    // MARK: - Transaction bodies

    static func apply(
        _ change: RemoteChange, bucket: BucketRow, now: Int64, sent: SentChanges, ours: Bool = false, outcome: inout RemoteOutcome,
        _ db: Database
    ) throws {
        var row = try EntityRow.find(bucketID: bucket.id, key: change.key, db)
        if var existing = row, let open = try ChangeRow.open(entityID: existing.id, db), change.ccids.contains(open.ccid) {
            try acknowledge(
                open, sent: sent.take(ccid: open.ccid), change: change, row: &existing, bucket: bucket, now: now,
                outcome: &outcome, db)
            return
        }
        switch change.operation {
        case .remove:
            guard let existing = row else { return }
            if let ev = change.endVersion, let known = existing.ghostVersion, known > ev { return }
            // Our create the server has not acknowledged yet: the removal is of an earlier entity
            // under this key (the server answers a change before anyone can remove what it made),
            // and must not take the new one, removed here since or not.
            let open = existing.ghostVersion == nil || existing.deletedPending ? try ChangeRow.open(entityID: existing.id, db) : nil
            if existing.ghostVersion == nil, open != nil { return }
            // The same while our create is in flight under a removal made here since, when a note
            // made elsewhere came meanwhile (the ghost is its version): the server makes the note
            // again with our create after this removal, and our removal follows that. Forgotten
            // here, the row would be missing when our create's echo comes, which would then show
            // the note on every device (issue 34's model run, seed 2505818249). The server has no
            // note now: the ghost says so, and our create's echo is applied over nothing.
            if existing.deletedPending, let open, open.op == "M", open.sv == nil {
                var row = existing
                row.setGhost([:], version: nil)
                try row.update(db)
                return
            }
            try removeFromServerSide(existing, bucket: bucket, now: now, version: change.endVersion, clientID: change.clientID, outcome: &outcome, db)
            if ours, try EntityRow.find(bucketID: bucket.id, key: change.key, db) == nil {
                try markRemovedHere(key: change.key, bucket: bucket, db)
            }
        case .modify(let diff):
            let endVersion = change.endVersion ?? (change.sourceVersion ?? 0) + 1
            if var existing = row, change.sourceVersion == nil, existing.awaitsVerification(in: bucket) {
                // Missing from a re-index (`applyIndexPage`), and created again on the server
                // since (its author sent it again, or a new note took the key): the server's
                // entity from now on, whatever the answer about our version says. Our value
                // merges in as a concurrent create where it was ours; else it gives way.
                existing.needsReload = false
                existing.reloadVersion = nil
                guard let created = try? Merge.apply(diff, to: [:]) else {
                    try markForReload(key: change.key, version: endVersion, bucket: bucket, now: now, outcome: &outcome, db)
                    return
                }
                let oldGhost = existing.authored ? [:] : try existing.ghost()
                try adopt(
                    created, version: endVersion, oldGhost: oldGhost, remoteDiff: nil, row: &existing, bucket: bucket, now: now,
                    clientID: change.clientID, outcome: &outcome, db)
                return
            }
            let sourceMatches: Bool
            if let existing = row {
                if let known = existing.ghostVersion, known >= endVersion { return }  // already have it
                sourceMatches = existing.ghostVersion == change.sourceVersion && !existing.needsReload
            } else {
                sourceMatches = change.sourceVersion == nil
            }
            guard sourceMatches else {
                try markForReload(key: change.key, version: endVersion, bucket: bucket, now: now, outcome: &outcome, db)
                return
            }
            if row == nil {
                row = try EntityRow.new(bucketID: bucket.id, key: change.key, now: now, db)
            }
            guard var target = row else { return }
            let oldGhost = try target.ghost()
            guard let newGhost = try? Merge.apply(diff, to: oldGhost) else {
                // Spec: a change that cannot be applied means the object is reloaded.
                try target.save(db)
                try markForReload(key: change.key, version: endVersion, bucket: bucket, now: now, outcome: &outcome, db)
                return
            }
            try adopt(
                newGhost, version: endVersion, oldGhost: oldGhost, remoteDiff: diff, row: &target, bucket: bucket, now: now,
                clientID: change.clientID, ours: ours, outcome: &outcome, db)
        }
    }

    /// A removal of ours acknowledged while the entity's row stays (its file made again
    /// meanwhile): remembered as `Schema`'s trigger remembers a deleted row's, and as ours. (Its
    /// highest version is the trigger's to keep: the row's ghost version goes away after this.)
    static func rememberRemovalHere(key: String, version: Int, bucket: BucketRow, _ db: Database) throws {
        try db.cachedStatement(
            sql: """
                INSERT INTO removed_entity (bucket, key, last_version, removed_here) VALUES (?, ?, ?, 1)
                ON CONFLICT (bucket, key) DO UPDATE SET last_version = excluded.last_version, removed_here = 1
                """
        ).execute(binding: bucket.name, key, version)
    }

    /// The removal `removed_entity` remembers for `key` was this store's: a restore that lost it
    /// has this store send it again (`applyIndexPage`).
    static func markRemovedHere(key: String, bucket: BucketRow, _ db: Database) throws {
        try db.cachedStatement(sql: "UPDATE removed_entity SET removed_here = 1 WHERE bucket = ? AND key = ?")
            .execute(binding: bucket.name, key)
    }

    /// Our change came back: the ghost moves to the server's result (the diff as the server
    /// applied it), and the next coalesced edit, if any, becomes ready. `sent`: the change as it
    /// went out, when remembered; if the server applied exactly it, its result is the new ghost
    /// as it stands, and with no local edit since, the entity is in sync without a diff.
    static func acknowledge(
        _ open: ChangeRow, sent: SentChanges.Sent?, change: RemoteChange, row: inout EntityRow, bucket: BucketRow,
        now: Int64, outcome: inout RemoteOutcome, _ db: Database
    ) throws {
        try open.delete(db)
        outcome.acknowledged.append(open.ccid)
        row.acknowledgeEdits(of: open)
        // The file's ctime stays: only its bytes, name or times change it, never the sync state
        // (backup tools key on ctime; an acknowledgement must not make them read the file again).
        // The server's echo says what it did (the row may have been re-queued meanwhile).
        if change.operation == .remove {
            if row.deletedPending || !row.hasFile {
                try row.delete(db)
                try markRemovedHere(key: row.key, bucket: bucket, db)
                return
            }
            // Re-created locally after the removal was sent (its bytes JSON or not): a new
            // entity, sent as one once its bytes are a JSON object. The removal is remembered as
            // a deleted row's would be: a server restored from before it lists the old note
            // again, and this store is the one to remove it again (`applyIndexPage`).
            if let removed = row.ghostVersion { try rememberRemovalHere(key: row.key, version: removed, bucket: bucket, db) }
            row.setGhost([:], version: nil)
        } else if case .modify(let diff) = change.operation {
            let endVersion = change.endVersion ?? (change.sourceVersion ?? 0) + 1
            row.authored = true
            row.authoredCCID = open.ccid
            if let ghost = sent?.acknowledgedGhost(of: open, echo: diff, sourceVersion: change.sourceVersion, entity: row) {
                row.ghostData = ghost
                row.ghostVersion = endVersion
                if let local = row.localValue, exactlyEqual(local, ghost) {
                    // What `reconcileQueue` would find: the local value is the server's.
                    if row.state != EntityState.invalid.description { row.state = EntityState.synced.description }
                    row.reason = nil
                    try row.updateSyncState(db)
                    return
                }
            } else if row.ghostVersion == change.sourceVersion, let ghost = try? Merge.apply(diff, to: try row.ghost()) {
                row.setGhost(ghost, version: endVersion)
            } else if let known = row.ghostVersion, known >= endVersion {
                // A reload already brought a version that includes this change.
            } else {
                // We missed versions in between. The server's version includes our change, so
                // count it into the base the reload rebases from: only later local edits are
                // then replayed over the reloaded data (never our acknowledged edit twice).
                if let sent = open.diff, let base = try? Merge.apply(try StoredJSON.object(sent, column: "pending_change.diff"), to: try row.ghost()) {
                    row.ghostData = StoredJSON.text(base)
                } else if let full = open.fullData {
                    row.ghostData = full
                }
                row.needsReload = true
                row.reloadVersion = endVersion
                outcome.reloads.append(ReloadRequest(key: row.key, version: endVersion))
            }
        }
        if row.state == EntityState.conflict.description { row.state = EntityState.pending.description }
        row.reason = nil
        if let next = try reconcileQueue(&row, bucket: bucket.name, db) { outcome.ready(next) }
        try row.update(db)
    }

    /// The server's version is now `newGhost`; rebase the local edit over it and show the result.
    static func adopt(
        _ newGhost: JSONObject, version: Int, oldGhost: JSONObject, remoteDiff: JSONObject?, row: inout EntityRow,
        bucket: BucketRow, now: Int64, clientID: String? = nil, ours: Bool = false, outcome: inout RemoteOutcome, _ db: Database
    ) throws {
        var isNew = !row.hasFile && !row.deletedPending
        // The version a removal made here was made against (nil: a note the server never had).
        let removalBase = row.ghostVersion
        row.needsReload = false
        row.reloadVersion = nil
        row.setGhost(newGhost, version: version)
        // A change of ours that came back as a remote one (`applyRemote`'s `ownClientID`) keeps
        // the value ours; any other makes it someone else's.
        row.authored = ours
        row.authoredCCID = nil
        if !row.deletedPending, row.hasFile, row.state != EntityState.synced.description,
            let removal = try ChangeRow.open(entityID: row.id, db), removal.op == "-"
        {
            // Made again here after a removal of ours went out (or under a removal sent again,
            // `resendLostRemoval`): the file is a new note. This version is the old note's, which
            // the removal follows; the file keeps what it holds, and is created as a new note
            // once the removal is acknowledged (`acknowledge`). Rebased, an edit of the old note
            // would show in the file as if made here, and go out with its create (issue 34's
            // model run, seed 3725294980: a note renamed away and back brought back another
            // mount's edit, which that mount had removed since).
            try row.update(db)
            return
        }
        let open = row.deletedPending ? try ChangeRow.open(entityID: row.id, db) : nil
        // An edit of ours in flight against a note the server removed since (the ghost is nothing
        // after a version): whatever its answer, the removal made here was of that note.
        let editOfARemovedNote = removalBase == nil && open?.op == "M" && open?.sv != nil
        // A whole value at or below the highest version this store knew of the note is that note
        // as a server restored from a backup has it, not another one: the removal made here
        // takes it (issue 34's model run, seed 2401763981: after two restores, a note removed
        // here came back with a value from before them, at the version its resend had taken).
        let restoredPast: Bool
        if row.deletedPending, remoteDiff == nil, let removalBase {
            restoredPast = version <= max(removalBase, try highestVersionKnown(key: row.key, bucket: bucket, db) ?? 0)
        } else {
            restoredPast = false
        }
        if row.deletedPending, removalBase == nil || remoteDiff == nil, !restoredPast, open?.state != "sent" || editOfARemovedNote {
            // A removal made here must only ever take the note it was made against. This version
            // may be another note: one made elsewhere while ours never reached the server, or,
            // when the server's value comes whole (a reload, an index), one made after the server
            // removed ours (the removal between is not seen). The removal gives way and the
            // server's note shows, as a new file. Not while a create of ours is in flight: the
            // server answers it after this version (refused as the key is taken, or applied), and
            // the removal follows that answer, as it always has. An edit in flight stays open for
            // its answer (an echo, or a 404 `reject` finds stale), with nothing to remove after it.
            if let open, open.state != "sent" { try open.delete(db) }
            row.deletedPending = false
            row.nodeID = try Schema.allocateNodeID(db)
            isNew = true
        }
        if row.deletedPending {
            // The local delete still wins; its change now refers to the new version.
            if let next = try reconcileQueue(&row, bucket: bucket.name, db) { outcome.ready(next) }
            try row.update(db)
            return
        }
        var merged = newGhost
        let localBefore = try row.local()
        if let local = localBefore {
            if !bucket.format.mergesEdits, local != oldGhost, newGhost != oldGhost, local != newGhost {
                // Opaque bytes changed on both sides: the local ones kept whole, sent over the server's.
                merged = local
                row.state = EntityState.conflict.description
                row.reason = "changed on the server while changed here; local bytes kept and sent over the server's"
            } else { do {
                merged = try Merge.rebase(local: local, oldGhost: oldGhost, newGhost: newGhost, remoteDiff: remoteDiff)
            } catch {
                // Could not merge: keep the local value whole (nothing lost), send it over the new version.
                merged = local
                row.state = EntityState.conflict.description
                row.reason = "local and remote edits could not be merged (\(error)); local value kept"
            } }
        }
        if row.holdsInvalidBytes {
            // The file holds bytes that are not JSON; keep them (the user is mid-edit), track the value.
            row.localValue = StoredJSON.text(merged)
        } else if let localBefore, row.hasFile, merged == localBefore {
            // Nothing changed for the file (the server's version is the local edit, as after a
            // catch-up that finds our own change applied): its bytes stay exactly as written.
        } else {
            try row.render(merged, in: bucket.format, now: now, db)
        }
        let conflict = row.state == EntityState.conflict.description
        if let next = try reconcileQueue(&row, bucket: bucket.name, db) { outcome.ready(next) }
        if conflict && row.state == EntityState.pending.description { row.state = EntityState.conflict.description }
        try row.save(db)
        outcome.events.append(
            RemoteEvent(
                bucket: bucket.name, key: row.key, entityID: row.id, nodeID: row.nodeID, kind: isNew ? .created : .changed,
                version: version,
                clientID: clientID))
    }

    static func load(
        key: String, version: Int, data: JSONObject?, madeBy: String? = nil, bucket: BucketRow, now: Int64,
        outcome: inout RemoteOutcome, _ db: Database
    ) throws {
        guard var row = try EntityRow.find(bucketID: bucket.id, key: key, db) else {
            guard let data else { return }
            var row = try EntityRow.new(bucketID: bucket.id, key: key, now: now, db)
            try adopt(data, version: version, oldGhost: [:], remoteDiff: nil, row: &row, bucket: bucket, now: now, outcome: &outcome, db)
            return
        }
        if row.needsReload, row.reloadVersion == version, row.ghostVersion == version,
            let listed = try Row.fetchOne(
                db.cachedStatement(sql: "SELECT version, data FROM listed_version WHERE entity_id = ?"), arguments: [row.id])
        {
            // The answer to `checkHistory`'s question: is the version the index listed newer in
            // our history (the server has ours as we had it), or another history's?
            try db.cachedStatement(sql: "DELETE FROM listed_version WHERE entity_id = ?").execute(binding: row.id)
            let listedVersion: Int = listed["version"]
            let listedData = try StoredJSON.object(listed["data"], column: "listed_version.data")
            let ghost = try row.ghost()
            if let data, data == ghost, row.mayBeOurs(versionMadeBy: madeBy) {
                try adopt(listedData, version: listedVersion, oldGhost: ghost, remoteDiff: nil, row: &row, bucket: bucket, now: now, outcome: &outcome, db)
                return
            }
            // Another history: the server lost our value; it is sent again over the listed version.
            try sendAgain(
                &row, over: listedData, version: listedVersion,
                reason: "the server had lost changes to this note (restored from a backup?); sent again", bucket: bucket,
                outcome: &outcome, db)
            return
        }
        if row.awaitsVerification(in: bucket), row.reloadVersion == version {
            // The answer to a re-index's question (`applyIndexPage`): the entity is not in the
            // server's index; does the server have the version we had acknowledged?
            row.needsReload = false
            row.reloadVersion = nil
            // The same version with other data is another history's (a restore of a backup
            // taken before an earlier restore, whose versions ours reuse): the server never had
            // ours, so it did not remove it.
            let hadOurs = try data.map { try $0 == row.ghost() } ?? false && row.mayBeOurs(versionMadeBy: madeBy)
            if hadOurs || !row.authored {
                // It had it, so it removed the entity since: a removal like any other. Or it
                // lost a value another mount made: that mount sends it again (`resendIfServerLost`).
                try removeFromServerSide(row, bucket: bucket, now: now, outcome: &outcome, db)
                return
            }
            // It never had it: the server lost the entity (restored from a backup older than
            // it, or of another history), and it is created there again from our value.
            try sendAgain(
                &row, over: [:], version: nil, reason: "the server had lost this note (restored from a backup?); sent again",
                bucket: bucket, outcome: &outcome, db)
            return
        }
        guard let data else {
            // `?`: the server has no such entity/version. Unasked for any more (a change that
            // came meanwhile settled it): nothing to do.
            guard row.needsReload else { return }
            row.needsReload = false
            row.reloadVersion = nil
            if row.holdsInvalidBytes, try row.local() == row.ghost() {
                // Invalid JSON over the server's last value, now gone: the bytes stay, unsent.
                row.localValue = nil
            }
            if row.localValue == nil && !row.holdsInvalidBytes {
                try row.delete(db)
                if row.hasFile {
                    outcome.events.append(RemoteEvent(bucket: bucket.name, key: key, entityID: row.id, nodeID: row.nodeID, kind: .removed))
                }
                return
            }
            row.setGhost([:], version: nil)
            if let next = try reconcileQueue(&row, bucket: bucket.name, db) { outcome.ready(next) }
            try row.update(db)
            return
        }
        if let known = row.ghostVersion, known > version {
            // A stale answer: we already hold a newer version.
            row.needsReload = false
            row.reloadVersion = nil
            try row.update(db)
            return
        }
        // Rebase relative to what the local edit was made against: the current ghost.
        let oldGhost = try row.ghost()
        try adopt(data, version: version, oldGhost: oldGhost, remoteDiff: nil, row: &row, bucket: bucket, now: now, outcome: &outcome, db)
    }

    static func markForReload(
        key: String, version: Int?, bucket: BucketRow, now: Int64, outcome: inout RemoteOutcome, _ db: Database
    ) throws {
        var row = try EntityRow.find(bucketID: bucket.id, key: key, db)
            ?? EntityRow.new(bucketID: bucket.id, key: key, now: now, db)
        row.needsReload = true
        row.reloadVersion = version
        try row.save(db)
        outcome.reloads.append(ReloadRequest(key: key, version: version))
    }

    /// The server no longer has the entity: forget it unless there is a local edit, which is
    /// kept and re-created on the server (spec: `-` only when no local change is pending).
    static func removeFromServerSide(
        _ existing: EntityRow, bucket: BucketRow, now: Int64, version: Int? = nil, clientID: String? = nil,
        outcome: inout RemoteOutcome, _ db: Database
    ) throws {
        var row = existing
        let open = try ChangeRow.open(entityID: row.id, db)
        let hasLocalEdit = try row.hasLocalEdit(open: open)
        if row.holdsInvalidBytes && !hasLocalEdit {
            // The file holds what the user is typing (not JSON yet) over a value the server had:
            // the bytes stay, and nothing is sent until they are valid, then as a new note. The
            // last valid value is not sent again: it was the server's, and the server removed it.
            if let open { try open.delete(db) }
            row.setGhost([:], version: nil)
            row.localValue = nil
            row.needsReload = false
            row.reason = "removed on the server while this file held invalid JSON; your bytes are kept, and sent as a new note once valid"
            try row.update(db)
            return
        }
        if !hasLocalEdit {
            try row.delete(db)
            if row.hasFile {
                outcome.events.append(
                    RemoteEvent(
                        bucket: bucket.name, key: row.key, entityID: row.id, nodeID: row.nodeID, kind: .removed, version: version,
                        clientID: clientID))
            }
            return
        }
        // A change already sent stays open: the server answers it after this removal (it answers
        // in order), either applying it (a create makes the entity again, and its echo is ours)
        // or refusing it (404: resent whole, a create). Forgotten here, a local removal before
        // that answer would find an entity the server "never had" and tell it nothing, and the
        // create's echo would bring the file back on every device. One the server has applied
        // already (`applied`) is done: the removal came after it.
        if let open, open.state == "applied" { try open.delete(db) }
        let invalid = row.holdsInvalidBytes
        row.setGhost([:], version: nil)
        row.needsReload = false
        row.state = EntityState.conflict.description
        row.reason = "removed on the server while edited locally; local value kept and re-created"
        _ = try reconcileQueue(&row, bucket: bucket.name, db).map { outcome.ready($0) }
        // A file holding invalid JSON shows so still (its last valid edit is what is re-created).
        row.state = invalid ? EntityState.invalid.description : EntityState.conflict.description
        try row.update(db)
    }
}
