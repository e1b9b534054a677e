import Foundation
import GRDB
import JSONDiff
import Testing
@testable import SyncStore

@Suite("applyRemote / applyEntity / index", .timeLimit(.minutes(1)))
struct ApplyRemoteTests {
    @Test func remoteCreateShowsRenderedFileAndEmitsEvent() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.cleanup() }
        let store = try SyncStore(path: directory.storePath)
        _ = try store.ensureBucket("notes")
        do {
            let events = store.remoteEvents()
            let outcome = try store.applyRemote(
                bucket: "notes",
                changes: [RemoteChange(key: "k", operation: .modify(diff: wireDiff([:], ["b": 1, "a": "x"])), sourceVersion: nil, endVersion: 1, cv: "c1", clientID: "other", ccids: ["ff"])])
            #expect(outcome.events.map(\.kind) == [.created])
            #expect(try store.readEntity(bucket: "notes", key: "k") == bytes("{\n  \"a\": \"x\",\n  \"b\": 1\n}\n"))
            var iterator = events.makeAsyncIterator()
            let event = await iterator.next()
            #expect(event?.key == "k")
            #expect(try store.entity(bucket: "notes", key: "k")?.state == .synced)
            #expect(try store.bucket(named: "notes")?.cv == "c1")
        }
        try store.close()
    }

    @Test func remoteChangeRebasesPendingLocalEditSoBothSurvive() throws {
        try withStore { store, _ in
            _ = try seed(store, key: "k", version: 1, data: ["title": "t", "body": "b"])
            _ = try store.saveLocal(bucket: "notes", key: "k", value: ["title": "local", "body": "b"])
            let outcome = try store.applyRemote(
                bucket: "notes",
                changes: [RemoteChange(key: "k", operation: .modify(diff: wireDiff(["title": "t", "body": "b"], ["title": "t", "body": "remote"])), sourceVersion: 1, endVersion: 2, cv: "c2", ccids: ["aa"])])
            #expect(outcome.reloads.isEmpty)
            let entity = try #require(try store.entity(bucket: "notes", key: "k"))
            #expect(entity.value == ["title": "local", "body": "remote"])
            #expect(entity.ghost == ["title": "t", "body": "remote"])
            #expect(entity.version == 2)
            #expect(entity.state == .pending)
            // The queued change was recomputed against the new ghost.
            let change = try #require(try store.outgoingChanges(bucket: "notes").first)
            #expect(change.sourceVersion == 2)
            #expect(change.operation == .modify(diff: wireDiff(["title": "t", "body": "remote"], ["title": "local", "body": "remote"])))
        }
    }

    /// The server's version turns out to be the local edit itself (a catch-up after the server
    /// applied our change but its answer was lost): the file keeps the bytes the user wrote, as
    /// it does until a change from elsewhere arrives (found by the whole-system model test).
    @Test func aReloadThatBringsTheLocalValueKeepsTheFilesBytes() throws {
        try withStore { store, _ in
            _ = try seed(store, key: "k", version: 1, data: ["n": 1])
            let written = bytes("{\"n\": 2}\n")
            _ = try store.saveLocal(bucket: "notes", key: "k", bytes: written)
            _ = try store.applyEntity(bucket: "notes", key: "k", version: 2, data: ["n": 2])
            #expect(try store.readEntity(bucket: "notes", key: "k") == written)
            #expect(try store.entity(bucket: "notes", key: "k")?.state == .synced)
            // A change from elsewhere renders it again.
            _ = try store.applyEntity(bucket: "notes", key: "k", version: 3, data: ["n": 3])
            #expect(try store.readEntity(bucket: "notes", key: "k") == bytes("{\n  \"n\": 3\n}\n"))
        }
    }

    /// A file removed, then made again with bytes that are not JSON while the removal was on its
    /// way: the removal's acknowledgement must not take the new file (found by the whole-system
    /// model test: the user's bytes vanished, and a rename of the file answered ENOENT).
    @Test func theAcknowledgedRemovalOfAFileMadeAgainWithInvalidJSONKeepsIt() throws {
        try withStore { store, _ in
            _ = try seed(store, key: "k", version: 1, data: ["n": 1])
            let removal = try #require(try store.deleteLocal(bucket: "notes", key: "k"))
            try store.markSent([removal])
            let typed = bytes("{\"n\": ")
            let saved = try store.saveLocal(bucket: "notes", key: "k", bytes: typed)
            #expect(saved.parseError != nil)
            _ = try store.applyRemote(
                bucket: "notes",
                changes: [RemoteChange(key: "k", operation: .remove, sourceVersion: 1, endVersion: 2, cv: "c2", clientID: "us", ccids: [removal.ccid])])
            #expect(try store.readEntity(bucket: "notes", key: "k") == typed)
            #expect(try store.entity(bucket: "notes", key: "k")?.state == .invalid)
            // Fixed, it goes to the server as a new entity.
            let fixed = try store.saveLocal(bucket: "notes", key: "k", bytes: bytes("{\"n\": 3}"))
            #expect(fixed.readyToSend?.sourceVersion == nil)
            #expect(fixed.readyToSend?.operation == .modify(diff: wireDiff([:], ["n": 3])))
        }
    }

    /// `rm a.json`, a new `a.json` saved and sent as a new entity, `rm` again, all before the
    /// server answered the create: a removal of the earlier entity delivered now (a catch-up
    /// from an earlier cv) must not take the new entity's row, or the create's echo makes the
    /// file anew from the server (a file removed twice came back, after a kill -9 of the mount).
    @Test func aRemovalOfAnEarlierEntityLeavesACreateTheServerHasNotAnswered() throws {
        try withStore { store, _ in
            _ = try seed(store, key: "k", version: 1, data: ["n": 1])
            let removal = try #require(try store.deleteLocal(bucket: "notes", key: "k"))
            try store.markSent([removal])
            _ = try store.saveLocal(bucket: "notes", key: "k", bytes: bytes("{\"n\": 2}"))
            let earlier = RemoteChange(key: "k", operation: .remove, sourceVersion: 1, endVersion: 2, cv: "c2", clientID: "us", ccids: [removal.ccid])
            let acknowledged = try store.applyRemote(bucket: "notes", changes: [earlier])
            let create = try #require(acknowledged.readyToSend.first)
            #expect(create.sourceVersion == nil)
            try store.markSent([create])
            _ = try store.deleteLocal(bucket: "notes", key: "k")
            // The earlier removal again (another client's removal of the earlier entity would do the same).
            _ = try store.applyRemote(
                bucket: "notes", changes: [RemoteChange(key: "k", operation: .remove, sourceVersion: 1, endVersion: 2, cv: "c2", clientID: "x", ccids: ["x1"])])
            // The create's echo: the removal made here since goes out, and no file comes back.
            let echo = try store.applyRemote(
                bucket: "notes",
                changes: [RemoteChange(
                    key: "k", operation: .modify(diff: wireDiff([:], ["n": 2])), sourceVersion: nil, endVersion: 3, cv: "c3", clientID: "us",
                    ccids: [create.ccid])])
            #expect(echo.events.isEmpty)
            #expect(echo.readyToSend.map(\.operation) == [.remove])
            #expect(try store.readEntity(bucket: "notes", key: "k") == nil)
        }
    }

    /// Removed on the server while a change of ours is in flight, then removed here before the
    /// server answers that change (sync-model seed 2695662831): the server applies it after the
    /// removal, a create making the note again, and the removal made here must follow it, not be
    /// dropped as the removal of a note the server never had (the file came back everywhere).
    @Test func aRemovalHereFollowsAChangeInFlightWhenTheServerRemovedTheNoteMeanwhile() throws {
        try withStore { store, _ in
            let create = try #require(try store.saveLocal(bucket: "notes", key: "k", bytes: bytes("{\"n\": 104}")).readyToSend)
            try store.markSent([create])
            // Another mount's create under the key merges in, and its removal follows, both
            // before ours reaches the server.
            _ = try store.applyRemote(
                bucket: "notes",
                changes: [RemoteChange(
                    key: "k", operation: .modify(diff: wireDiff([:], ["n": 101])), sourceVersion: nil, endVersion: 7, cv: "c7",
                    clientID: "m1", ccids: ["m1-create"])])
            let removed = try store.applyRemote(
                bucket: "notes",
                changes: [RemoteChange(key: "k", operation: .remove, sourceVersion: 7, endVersion: 8, cv: "c8", clientID: "m1", ccids: ["m1-remove"])])
            #expect(removed.events.isEmpty)  // the file stays: it holds our edit
            _ = try store.deleteLocal(bucket: "notes", key: "k")
            // The server applies our create after the removal: its echo.
            let echo = try store.applyRemote(
                bucket: "notes",
                changes: [RemoteChange(
                    key: "k", operation: .modify(diff: wireDiff([:], ["n": 104])), sourceVersion: nil, endVersion: 9, cv: "c9",
                    clientID: "us", ccids: [create.ccid])])
            #expect(echo.events.isEmpty)
            #expect(echo.acknowledged == [create.ccid])
            let removal = try #require(echo.readyToSend.first)
            #expect(removal.operation == .remove)
            #expect(removal.sourceVersion == 9)
            #expect(try store.readEntity(bucket: "notes", key: "k") == nil)
        }
    }

    /// A removal made here never takes a note it was not made against (sync-model seed
    /// 2639057729: a mount's removal, waiting, took a note another mount made after the quiesce
    /// that agreed it was gone). The server's value coming whole (a reload, an index) may be a
    /// note made after the server removed ours: the removal gives way and the note shows.
    @Test func aRemovalWaitingHereGivesWayToAVersionThatCameWhole() throws {
        try withStore { store, _ in
            _ = try seed(store, key: "k", version: 1, data: ["n": 1])
            #expect(try store.deleteLocal(bucket: "notes", key: "k")?.operation == .remove)
            // The reload's answer: version 3, a note another device made after version 2 removed ours.
            let outcome = try store.applyEntity(bucket: "notes", key: "k", version: 3, data: ["n": 107])
            #expect(outcome.readyToSend.isEmpty)
            #expect(outcome.events.map(\.kind) == [.created])
            #expect(try store.outgoingChanges(bucket: "notes").isEmpty)
            let entity = try #require(try store.entity(bucket: "notes", key: "k"))
            #expect(entity.value == ["n": 107])
            #expect(!entity.deletedPending)
        }
    }

    /// But a value that comes whole at or below the highest version this store knew of the note
    /// is the note as a restored server has it, not another one: the removal made here takes it
    /// (issue 34's model run, seed 2401763981: after two restores, the note this mount removed,
    /// whose resend had taken version 6 again, came back with the older backup's version 6).
    @Test func aRemovalWaitingHereTakesTheNoteARestoredServerHasAtAnOlderVersion() throws {
        // (the version coming whole, the ghost the removal was made against, the highest known)
        for (version, ghost, highest) in [(6, 6, 8), (5, 6, 8), (7, 6, 8), (6, 6, nil as Int?)] {
            try withStore { store, _ in
                _ = try seed(store, key: "k", version: ghost, data: ["n": 1_000_003])
                if let highest {
                    try store.write { db in
                        try db.execute(
                            sql: "INSERT INTO entity_highest_version (bucket, key, version) VALUES ('notes', 'k', ?)", arguments: [highest])
                    }
                }
                #expect(try store.deleteLocal(bucket: "notes", key: "k")?.operation == .remove)
                _ = try store.applyEntity(bucket: "notes", key: "k", version: version, data: ["n": 85])
                let owed = try store.outgoingChanges(bucket: "notes")
                #expect(owed.map(\.operation) == [.remove], "\((version, ghost, highest))")
                // (A version below the ghost is not applied at all: the removal stays over the ghost's.)
                #expect(owed.first?.sourceVersion == max(version, ghost))
                #expect(try store.entity(bucket: "notes", key: "k")?.deletedPending == true)
            }
        }
    }

    /// A local change the store holds back until a reload (the server's versions were missed)
    /// counts as owed, so `bucketfs sync` and status wait for it, until the reload sends it.
    @Test func aChangeHeldBackForAReloadCountsAsOwed() throws {
        try withStore { store, _ in
            _ = try seed(store, key: "k", version: 1, data: ["n": 1])
            // A change from version 2 to 3: version 2 was missed, so the entity is reloaded.
            let missed = try store.applyRemote(
                bucket: "notes",
                changes: [RemoteChange(key: "k", operation: .modify(diff: wireDiff(["n": 2], ["n": 3])), sourceVersion: 2, endVersion: 3, cv: "c3")])
            #expect(missed.reloads.map(\.key) == ["k"])
            // An edit meanwhile waits for the reload (a diff against version 1 would not apply).
            #expect(try store.saveLocal(bucket: "notes", key: "k", bytes: bytes("{\"n\": 1, \"mine\": true}")).readyToSend == nil)
            #expect(try store.stats().queuedChanges == 0)
            #expect(try store.stats().changesAwaitingReload == 1)
            let answer = try store.applyEntity(bucket: "notes", key: "k", version: 3, data: ["n": 3])
            #expect(answer.readyToSend.count == 1)
            #expect(try store.stats().changesAwaitingReload == 0)
        }
    }

    /// A removal refused as made against an older version (405; the server never applies one)
    /// goes again over the version the store has caught up to when the note was only edited
    /// since; when it was removed and made again by someone else, the catch-up's removal ends it
    /// and the new note stays.
    @Test func aRemovalRefusedAsStaleGoesAgainOverTheNewVersionOrEnds() throws {
        /// A note at version 1, removed here, the removal sent.
        func sentRemoval(_ store: SyncStore) throws -> OutgoingChange {
            _ = try seed(store, key: "k", version: 1, data: ["n": 1])
            let removal = try #require(try store.deleteLocal(bucket: "notes", key: "k"))
            try store.markSent([removal])
            return removal
        }
        try withStore { store, _ in
            let removal = try sentRemoval(store)
            _ = try store.applyRemote(
                bucket: "notes",
                changes: [RemoteChange(key: "k", operation: .modify(diff: wireDiff(["n": 1], ["n": 2])), sourceVersion: 1, endVersion: 2, cv: "c2")])
            #expect(try store.reject(bucket: "notes", ccid: removal.ccid, code: 405) == .catchUp)
            let again = try store.outgoingChanges(bucket: "notes")
            #expect(again.map(\.operation) == [.remove])
            #expect(again.first?.sourceVersion == 2)
        }
        try withStore { store, _ in
            let removal = try sentRemoval(store)
            _ = try store.applyRemote(
                bucket: "notes",
                changes: [
                    RemoteChange(key: "k", operation: .remove, sourceVersion: 1, endVersion: 2, cv: "c2", clientID: "m1", ccids: ["m1-remove"]),
                    RemoteChange(
                        key: "k", operation: .modify(diff: wireDiff([:], ["n": 107])), sourceVersion: nil, endVersion: 3, cv: "c3",
                        clientID: "m0", ccids: ["m0-create"]),
                ])
            #expect(try store.reject(bucket: "notes", ccid: removal.ccid, code: 405) == .none)
            #expect(try store.outgoingChanges(bucket: "notes").isEmpty)
            #expect(try store.entity(bucket: "notes", key: "k")?.value == ["n": 107])
        }
    }

    /// And a removal of a note the server never had never takes the note another device makes
    /// under the key: our create refused (405: the key was taken), the removal made here since
    /// has nothing to remove, and a create from elsewhere then shows here (seed 2639057729).
    @Test func aRemovalOfACreateTheServerRefusedGivesWayToAnotherDevicesCreate() throws {
        try withStore { store, _ in
            let create = try #require(try store.saveLocal(bucket: "notes", key: "k", bytes: bytes("{\"n\": 87}")).readyToSend)
            try store.markSent([create])
            _ = try store.deleteLocal(bucket: "notes", key: "k")
            _ = try store.reject(bucket: "notes", ccid: create.ccid, code: 405)
            #expect(try store.outgoingChanges(bucket: "notes").isEmpty)
            let theirs = try store.applyRemote(
                bucket: "notes",
                changes: [RemoteChange(
                    key: "k", operation: .modify(diff: wireDiff([:], ["n": 107])), sourceVersion: nil, endVersion: 9, cv: "c9",
                    clientID: "m0", ccids: ["m0-create"])])
            #expect(theirs.events.map(\.kind) == [.created])
            #expect(!theirs.readyToSend.contains { $0.operation == .remove })
            #expect(try store.entity(bucket: "notes", key: "k")?.value == ["n": 107])
        }
    }

    /// With our create still in flight, another device's create does not undo the removal made
    /// here: the server answers ours after it, and the removal follows (seed 3992279630: the
    /// note came back although every mount that touched it removed it).
    @Test func aRemovalWithOurCreateInFlightStillFollowsIt() throws {
        try withStore { store, _ in
            let create = try #require(try store.saveLocal(bucket: "notes", key: "k", bytes: bytes("{\"n\": 45}")).readyToSend)
            try store.markSent([create])
            _ = try store.deleteLocal(bucket: "notes", key: "k")
            let theirs = try store.applyRemote(
                bucket: "notes",
                changes: [RemoteChange(
                    key: "k", operation: .modify(diff: wireDiff([:], ["n": 42])), sourceVersion: nil, endVersion: 1, cv: "c1",
                    clientID: "m0", ccids: ["m0-create"])])
            #expect(theirs.events.isEmpty)
            #expect(try store.readEntity(bucket: "notes", key: "k") == nil)
            // Ours refused (the key is taken): the removal goes, over the version the other made.
            guard case .resend(let removal) = try store.reject(bucket: "notes", ccid: create.ccid, code: 405) else {
                Issue.record("expected the removal to go"); return
            }
            #expect(removal.operation == .remove)
            #expect(removal.sourceVersion == 1)
        }
    }

    /// The same with an edit in flight, which the server refuses after the removal (404): with
    /// the file removed here too, nothing more goes; with the file kept, it is sent whole, as a
    /// new note.
    @Test func anEditInFlightRefusedAfterARemoteRemovalEndsAsTheFileDoes() throws {
        for removedHere in [true, false] {
            try withStore { store, _ in
                _ = try seed(store, key: "k", version: 1, data: ["n": 1])
                let edit = try #require(try store.saveLocal(bucket: "notes", key: "k", bytes: bytes("{\"n\": 2}")).readyToSend)
                try store.markSent([edit])
                _ = try store.applyRemote(
                    bucket: "notes",
                    changes: [RemoteChange(key: "k", operation: .remove, sourceVersion: 1, endVersion: 2, cv: "c2", clientID: "m1", ccids: ["m1-remove"])])
                #expect(try store.outgoingChanges(bucket: "notes").map(\.ccid) == [edit.ccid])
                if removedHere { _ = try store.deleteLocal(bucket: "notes", key: "k") }
                let followUp = try store.reject(bucket: "notes", ccid: edit.ccid, code: 404)
                if removedHere {
                    #expect(followUp == .none)
                    #expect(try store.readEntity(bucket: "notes", key: "k") == nil)
                    #expect(try store.outgoingChanges(bucket: "notes").isEmpty)
                } else {
                    guard case .resend(let created) = followUp else { Issue.record("expected a resend, got \(followUp)"); return }
                    #expect(created.sourceVersion == nil)
                    #expect(created.fullData == ["n": 2])
                }
            }
        }
    }

    /// Issue 34 (model seed 3956992952): an edit refused 404 (the note removed elsewhere) goes
    /// again whole, a create; meanwhile another mount made the note again, and the server's
    /// answer to ours leaves a difference with the merged local value (the server replaced what
    /// the other mount made; the local merge kept both). What goes next for that difference
    /// carries no edit made here that the server has not had: when the note is then removed by
    /// someone who saw ours, the removal holds (never a re-create from it), whether the removal
    /// comes before the change goes, while it is in flight (then refused 404), or after the 404.
    /// An edit saved here meanwhile is another matter: it is re-created (edit wins a removal).
    @Test func aMergeLeftOverFromARecreatedEditNeverRecreatesARemovedNote() throws {
        let ours: JSONObject = ["by": "m0", "n": 19, "text": "note 19 from m0"]
        let theirs4: JSONObject = ["by": "m2", "n": 20, "text": "note 20 from m2"]
        let theirs5: JSONObject = ["by": "m2", "n": 21, "text": "note 21 from m2"]
        for (order, savedMeanwhile) in [("before sent", false), ("in flight", false), ("after 404", false), ("in flight", true)] {
            try withStore { store, _ in
                _ = try seed(store, key: "k", version: 2, data: ["by": "m1", "n": 1, "text": "note 1 from m1"])
                let edit = try #require(try store.saveLocal(bucket: "notes", key: "k", value: ours).readyToSend)
                try store.markSent([edit])
                _ = try store.applyRemote(
                    bucket: "notes",
                    changes: [RemoteChange(key: "k", operation: .remove, sourceVersion: 2, endVersion: 3, cv: "c3", clientID: "m2", ccids: ["m2-rm"])])
                guard case .resend(let whole) = try store.reject(bucket: "notes", ccid: edit.ccid, code: 404) else {
                    Issue.record("404 resends the edit whole")
                    return
                }
                try store.markSent([whole])
                _ = try store.applyRemote(
                    bucket: "notes",
                    changes: [
                        RemoteChange(key: "k", operation: .modify(diff: wireDiff([:], theirs4)), sourceVersion: nil, endVersion: 4, cv: "c4", clientID: "m2", ccids: ["m2-c"]),
                        RemoteChange(key: "k", operation: .modify(diff: wireDiff(theirs4, theirs5)), sourceVersion: 4, endVersion: 5, cv: "c5", clientID: "m2", ccids: ["m2-m"]),
                    ])
                if savedMeanwhile {
                    var edited = try #require(try store.entity(bucket: "notes", key: "k")?.value)
                    edited["n"] = 22
                    _ = try store.saveLocal(bucket: "notes", key: "k", value: edited)
                }
                // The server applied our whole object over version 5 (it replaces what is there).
                _ = try store.applyRemote(
                    bucket: "notes",
                    changes: [RemoteChange(key: "k", operation: .modify(diff: wireDiff(theirs5, ours)), sourceVersion: 5, endVersion: 6, cv: "c6", clientID: "m0", ccids: [edit.ccid])])
                let leftOver = try #require(try store.outgoingChanges(bucket: "notes").first, "the local merge differs from the server's value")
                let removal = RemoteChange(key: "k", operation: .remove, sourceVersion: 6, endVersion: 7, cv: "c7", clientID: "m1", ccids: ["m1-rm"])
                switch order {
                case "before sent":
                    _ = try store.applyRemote(bucket: "notes", changes: [removal])
                case "in flight":
                    try store.markSent([leftOver])
                    _ = try store.applyRemote(bucket: "notes", changes: [removal])
                    if let followUp = try? store.reject(bucket: "notes", ccid: leftOver.ccid, code: 404), case .resend(let again) = followUp {
                        #expect(savedMeanwhile, "the left-over merge is sent again as a create: \(again)")
                    }
                default:
                    try store.markSent([leftOver])
                    let followUp = try store.reject(bucket: "notes", ccid: leftOver.ccid, code: 404)
                    #expect(followUp == .catchUp, "the left-over merge, refused 404, is not sent again as a create: the catch-up brings the removal")
                    #expect(try store.outgoingChanges(bucket: "notes").isEmpty)
                    _ = try store.applyRemote(bucket: "notes", changes: [removal])
                }
                let kept = try store.entity(bucket: "notes", key: "k")
                let owed = try store.outgoingChanges(bucket: "notes")
                if savedMeanwhile {
                    #expect(kept?.value?["n"] == 22, "\(order): the edit saved here meanwhile is kept")
                    #expect(owed.count == 1, "\(order): and sent")
                } else {
                    #expect(kept == nil, "\(order): the removal holds, but the note is \(String(describing: kept?.value))")
                    #expect(owed.isEmpty, "\(order): nothing is owed, but \(owed)")
                }
            }
        }
    }

    /// A store from before the edit counts (schema v11): an edit in flight then is still one a
    /// removal from elsewhere does not take.
    @Test func anEditInFlightInAStoreFromBeforeEditCountsIsStillKeptOverARemoval() throws {
        let directory = try TemporaryDirectory()
        defer { directory.cleanup() }
        try writeStoreFromBefore(
            "v10 highest versions", at: directory,
            """
            INSERT INTO bucket (id, name, ctime) VALUES (1, 'notes', 0);
            INSERT INTO entity (id, bucket_id, key, ghost_version, ghost_data, local_value, content, mtime, ctime, state,
                deleted_pending, needs_reload, seen_generation, node_id, authored)
            VALUES (2, 1, 'k', 1, '{"n":1}', '{"n":2}', X'7B226E223A327D0A', 0, 0, 'pending', 0, 0, 0, 2, 1);
            INSERT INTO pending_change (entity_id, ccid, sv, op, diff, state, created)
            VALUES (2, 'ours', 1, 'M', '{"n":{"o":"r","v":2}}', 'sent', 0);
            """)
        let store = try SyncStore(path: directory.storePath)
        defer { try? store.close() }
        _ = try store.applyRemote(
            bucket: "notes",
            changes: [RemoteChange(key: "k", operation: .remove, sourceVersion: 1, endVersion: 2, cv: "c2", clientID: "m1", ccids: ["m1-rm"])])
        #expect(try store.entity(bucket: "notes", key: "k")?.value == ["n": 2])
        guard case .resend(let created) = try store.reject(bucket: "notes", ccid: "ours", code: 404) else {
            Issue.record("the edit is re-created")
            return
        }
        #expect(created.fullData == ["n": 2])
    }

    /// Issue 34 (found by the two-node randomized test beside PostgreSQL faults, seed
    /// 11312772414599283553): an edit sent against version 4 was answered 404 (another device had
    /// removed the note at 5). The server remembers a refusal by ccid and request, and answers a
    /// resend of the same request the same: our edit went again after reconnecting, and its 404
    /// came back after the note had been made again (6) and edited (7). The store took that 404
    /// for "no note on the server" and forgot its row, so a removal made here meanwhile was never
    /// sent, and this client lost the note everyone else kept. A 404 is stale once the store has
    /// the note live at a version newer than the change's: the change is computed again over it
    /// (a new ccid: the server answers a new request anew), and a removal made here goes.
    @Test func aStale404AfterTheNoteWasMadeAgainNeitherDropsTheNoteNorTheRemovalMadeHere() throws {
        // Where the local removal falls: none, before the note is made again, after it.
        for removal in ["none", "before", "after"] {
            try withStore { store, _ in
                _ = try seed(store, key: "k", version: 4, data: ["n": 4])
                let edit = try #require(try store.saveLocal(bucket: "notes", key: "k", value: ["n": 4, "c": 1]).readyToSend)
                try store.markSent([edit])
                _ = try store.applyRemote(
                    bucket: "notes",
                    changes: [RemoteChange(key: "k", operation: .remove, sourceVersion: 4, endVersion: 5, cv: "c5", clientID: "b", ccids: ["b-rm"])])
                if removal == "before" { _ = try store.deleteLocal(bucket: "notes", key: "k") }
                _ = try store.applyRemote(
                    bucket: "notes",
                    changes: [
                        RemoteChange(
                            key: "k", operation: .modify(diff: wireDiff([:], ["n": 6])), sourceVersion: nil, endVersion: 6, cv: "c6",
                            clientID: "b", ccids: ["b-create"]),
                        RemoteChange(
                            key: "k", operation: .modify(diff: wireDiff(["n": 6], ["n": 7])), sourceVersion: 6, endVersion: 7, cv: "c7",
                            clientID: "a", ccids: ["a-edit"]),
                    ])
                if removal == "after" { _ = try store.deleteLocal(bucket: "notes", key: "k") }
                let followUp = try store.reject(bucket: "notes", ccid: edit.ccid, code: 404)
                let owed = try store.outgoingChanges(bucket: "notes")
                let entity = try store.entity(bucket: "notes", key: "k")
                #expect(entity != nil, "\(removal): the note's row stays")
                #expect(!owed.contains { $0.ccid == edit.ccid }, "\(removal): the stale request is not sent again")
                switch removal {
                case "after":
                    // Removed here after seeing version 7: the removal goes over it.
                    guard case .resend(let sent) = followUp else { Issue.record("\(removal): \(followUp)"); return }
                    #expect(sent.operation == .remove)
                    #expect(sent.sourceVersion == 7)
                case "before":
                    // Removed here before the new note came: the removal was of the old note, which
                    // the server removed already; the new one shows, and nothing is owed.
                    #expect(followUp == .none)
                    #expect(owed.isEmpty)
                    #expect(entity?.value == ["n": 7])
                default:
                    // The edit goes again over version 7, kept in the file.
                    guard case .resend(let sent) = followUp else { Issue.record("\(removal): \(followUp)"); return }
                    #expect(sent.operation != .remove && sent.sourceVersion == 7)
                    #expect(entity?.value?["c"] == 1, "the edit made here is kept")
                }
            }
        }
    }

    /// Issue 34 (model seed 3725294980): a file renamed away and back (`mv k2.json k2.bak; mv
    /// k2.bak k2.json`) while its removal was on the wire: the file made again is a new note,
    /// whatever it holds. Another mount's edit of the old note, applied by the server before our
    /// removal, moves the ghost (the removal's base) and leaves the new file alone; once the
    /// removal is acknowledged, the new note is created with the file's value. (The edit used to
    /// be rebased into the file, which looked unedited against the old note, and the create then
    /// brought back the other mount's value, which that mount had removed since.)
    @Test func aFileMadeAgainWhileItsRemovalIsInFlightKeepsItsValueOverEditsOfTheOldNote() throws {
        try withStore { store, _ in
            let old: JSONObject = ["by": "m2", "n": 1_000_002]
            _ = try seed(store, key: "k", version: 3, data: old)
            let removal = try #require(try store.deleteLocal(bucket: "notes", key: "k"))
            try store.markSent(ccids: [removal.ccid])
            _ = try store.saveLocal(bucket: "notes", key: "k", value: old)
            let theirs: JSONObject = ["by": "m1", "n": 53]
            _ = try store.applyRemote(
                bucket: "notes",
                changes: [RemoteChange(key: "k", operation: .modify(diff: wireDiff(old, theirs)), sourceVersion: 3, endVersion: 4, cv: "c4", clientID: "m1", ccids: ["m1-edit"])])
            #expect(try store.entity(bucket: "notes", key: "k")?.value == old, "the file made again keeps its value")
            _ = try store.applyRemote(
                bucket: "notes",
                changes: [RemoteChange(key: "k", operation: .remove, sourceVersion: 4, endVersion: 5, cv: "c5", clientID: "m0", ccids: [removal.ccid])])
            let create = try #require(try store.outgoingChanges(bucket: "notes").first)
            #expect(create.sourceVersion == nil)
            #expect(create.operation == .modify(diff: wireDiff([:], old)))
            #expect(try store.entity(bucket: "notes", key: "k")?.value == old)
        }
    }

    /// Issue 34's model run (seed 2505818249): a new file saved and removed at once, its create
    /// already on the wire, while another mount made and removed a note under the same key. The
    /// server applies theirs first, then makes the note again with our create. Their removal
    /// must not forget our row (whose removal is still to go): the echo of our create would find
    /// no row, and show the note on every device.
    @Test func aRemovalElsewhereWhileOurCreateIsInFlightLeavesOurRemovalToFollowIt() throws {
        try withStore { store, _ in
            let create = try #require(try store.saveLocal(bucket: "notes", key: "k", value: ["n": 73]).readyToSend)
            try store.markSent([create])
            #expect(try store.deleteLocal(bucket: "notes", key: "k") != nil)
            _ = try store.applyRemote(
                bucket: "notes",
                changes: [
                    RemoteChange(key: "k", operation: .modify(diff: wireDiff([:], ["n": 71])), sourceVersion: nil, endVersion: 1, cv: "c1", clientID: "m0", ccids: ["m0-c"]),
                    RemoteChange(key: "k", operation: .remove, sourceVersion: 1, endVersion: 2, cv: "c2", clientID: "m0", ccids: ["m0-r"]),
                ])
            #expect(try store.readEntity(bucket: "notes", key: "k") == nil)
            let echo = try store.applyRemote(
                bucket: "notes",
                changes: [RemoteChange(key: "k", operation: .modify(diff: wireDiff([:], ["n": 73])), sourceVersion: nil, endVersion: 3, cv: "c3", clientID: "us", ccids: [create.ccid])])
            #expect(echo.events.isEmpty, "no file comes back")
            #expect(try store.readEntity(bucket: "notes", key: "k") == nil)
            let removal = try #require(try store.outgoingChanges(bucket: "notes").first)
            #expect(removal.operation == .remove && removal.sourceVersion == 3)
        }
    }

    /// Issue 34's model run (seed 2089151026): a file holding invalid JSON, removed here, then
    /// another note under its key arrives whole while the removal waits (it gives way). The
    /// file is gone, so nothing invalid is left: the new note shows, in sync (it stayed
    /// `invalid` without a file, and `bucketfs sync` never finished).
    @Test func aFileRemovedWhileItHeldInvalidJSONIsNotInvalidAnyMore() throws {
        try withStore { store, _ in
            _ = try seed(store, key: "k", version: 1, data: ["n": 22])
            _ = try store.saveLocal(bucket: "notes", key: "k", bytes: bytes("{\"n\": 25,"))
            _ = try store.deleteLocal(bucket: "notes", key: "k")
            #expect(try store.entity(bucket: "notes", key: "k")?.state != .invalid)
            _ = try store.applyEntity(bucket: "notes", key: "k", version: 4, data: ["n": 39])
            let entity = try #require(try store.entity(bucket: "notes", key: "k"))
            #expect(entity.value == ["n": 39] && entity.state == .synced && !entity.deletedPending)
            #expect(try store.readEntity(bucket: "notes", key: "k") != nil, "the new note shows")
        }
    }

    /// Removed elsewhere while this file holds invalid JSON (the user mid-edit): the bytes stay.
    @Test func aRemoteRemovalKeepsAFileHoldingInvalidJSON() throws {
        try withStore { store, _ in
            _ = try seed(store, key: "k", version: 1, data: ["n": 1])
            let typed = bytes("{\"n\": 2,")
            _ = try store.saveLocal(bucket: "notes", key: "k", bytes: typed)
            _ = try store.applyRemote(
                bucket: "notes",
                changes: [RemoteChange(key: "k", operation: .remove, sourceVersion: 1, endVersion: 2, cv: "c2", clientID: "other", ccids: ["aa"])])
            #expect(try store.readEntity(bucket: "notes", key: "k") == typed)
            #expect(try store.entity(bucket: "notes", key: "k")?.state == .invalid)
            // Its last valid value was the server's, which removed it: nothing is sent again.
            #expect(try store.outgoingChanges(bucket: "notes").isEmpty)
            // The server's `?` for it later leaves it too.
            _ = try store.applyEntity(bucket: "notes", key: "k", version: 2, data: nil)
            #expect(try store.readEntity(bucket: "notes", key: "k") == typed)
            #expect(try store.outgoingChanges(bucket: "notes").isEmpty)
            // Fixed, it is a new note.
            let fixed = try store.saveLocal(bucket: "notes", key: "k", bytes: bytes("{\"n\": 5}"))
            #expect(fixed.readyToSend?.sourceVersion == nil)
            #expect(fixed.readyToSend?.operation == .modify(diff: wireDiff([:], ["n": 5])))
        }
    }

    @Test func sameStringFieldEditsMergeAsText() throws {
        try withStore { store, _ in
            let base: JSONObject = ["text": "hello world"]
            _ = try seed(store, key: "k", version: 1, data: base)
            _ = try store.saveLocal(bucket: "notes", key: "k", value: ["text": "hello brave world"])
            _ = try store.applyRemote(
                bucket: "notes",
                changes: [RemoteChange(key: "k", operation: .modify(diff: wireDiff(base, ["text": "hello world!"])), sourceVersion: 1, endVersion: 2, cv: "c2")])
            #expect(try store.entity(bucket: "notes", key: "k")?.value == ["text": "hello brave world!"])
        }
    }

    @Test func versionMismatchAsksForReloadAndReloadRebases() throws {
        try withStore { store, _ in
            _ = try seed(store, key: "k", version: 1, data: ["a": 1, "b": 1])
            _ = try store.saveLocal(bucket: "notes", key: "k", value: ["a": 2, "b": 1])
            let outcome = try store.applyRemote(
                bucket: "notes",
                changes: [RemoteChange(key: "k", operation: .modify(diff: ["b": ["o": "r", "v": 5]]), sourceVersion: 4, endVersion: 5, cv: "c5")])
            #expect(outcome.reloads == [ReloadRequest(key: "k", version: 5)])
            #expect(try store.pendingReloads(bucket: "notes") == [ReloadRequest(key: "k", version: 5)])
            _ = try seed(store, key: "k", version: 5, data: ["a": 1, "b": 5])
            let entity = try #require(try store.entity(bucket: "notes", key: "k"))
            #expect(entity.value == ["a": 2, "b": 5])
            #expect(entity.version == 5)
            #expect(try store.pendingReloads(bucket: "notes").isEmpty)
        }
    }

    @Test func changeForUnknownEntityWithSourceVersionIsReloaded() throws {
        try withStore { store, _ in
            let outcome = try store.applyRemote(
                bucket: "notes",
                changes: [RemoteChange(key: "ghost", operation: .modify(diff: ["a": ["o": "r", "v": 1]]), sourceVersion: 2, endVersion: 3, cv: "c3")])
            #expect(outcome.reloads == [ReloadRequest(key: "ghost", version: 3)])
            // A placeholder has no file until the data arrives.
            #expect(try store.entries(bucket: "notes").isEmpty)
            let loaded = try store.applyEntity(bucket: "notes", key: "ghost", version: 3, data: ["a": 1])
            #expect(loaded.events.map(\.kind) == [.created])
            #expect(try store.entries(bucket: "notes").count == 1)
        }
    }

    @Test func lateEntityReplyDoesNotReviveARemovedEntity() throws {
        try withStore { store, _ in
            try seed(store, key: "k", version: 1, data: ["a": 1])
            _ = try store.applyRemote(
                bucket: "notes", changes: [RemoteChange(key: "k", operation: .modify(diff: ["a": ["o": "r", "v": 3]]), sourceVersion: 2, endVersion: 3, cv: "c3")])
            _ = try store.applyRemote(
                bucket: "notes", changes: [RemoteChange(key: "k", operation: .remove, sourceVersion: 3, endVersion: 4, cv: "c4")])
            #expect(try store.entity(bucket: "notes", key: "k") == nil)
            let late = try store.applyEntity(bucket: "notes", key: "k", version: 3, data: ["a": 3])
            #expect(late.events.isEmpty)
            #expect(try store.entity(bucket: "notes", key: "k") == nil)
        }
    }

    @Test func unapplicableDiffAsksForReload() throws {
        try withStore { store, _ in
            _ = try seed(store, key: "k", version: 1, data: ["a": 1])
            let outcome = try store.applyRemote(
                bucket: "notes",
                changes: [RemoteChange(key: "k", operation: .modify(diff: ["zzz": ["o": "-"]]), sourceVersion: 1, endVersion: 2, cv: "c2")])
            #expect(outcome.reloads == [ReloadRequest(key: "k", version: 2)])
            #expect(try store.entity(bucket: "notes", key: "k")?.value == ["a": 1])
        }
    }

    @Test func remoteRemoveDeletesCleanEntity() throws {
        try withStore { store, _ in
            _ = try seed(store, key: "k", version: 1, data: ["a": 1])
            let outcome = try store.applyRemote(
                bucket: "notes", changes: [RemoteChange(key: "k", operation: .remove, sourceVersion: 1, endVersion: 2, cv: "c2")])
            #expect(outcome.events.map(\.kind) == [.removed])
            #expect(try store.entity(bucket: "notes", key: "k") == nil)
        }
    }

    @Test func remoteRemoveKeepsLocallyEditedEntityAndRecreatesIt() throws {
        try withStore { store, _ in
            _ = try seed(store, key: "k", version: 1, data: ["a": 1])
            _ = try store.saveLocal(bucket: "notes", key: "k", value: ["a": 2])
            let outcome = try store.applyRemote(
                bucket: "notes", changes: [RemoteChange(key: "k", operation: .remove, sourceVersion: 1, endVersion: 2, cv: "c2")])
            let entity = try #require(try store.entity(bucket: "notes", key: "k"))
            #expect(entity.value == ["a": 2])
            #expect(entity.state == .conflict)
            let change = try #require(try store.outgoingChanges(bucket: "notes").first)
            #expect(change.sourceVersion == nil)
            #expect(change.operation == .modify(diff: wireDiff([:], ["a": 2])))
            #expect(outcome.events.isEmpty)
        }
    }

    @Test func indexWithAndWithoutDataThenCompletionSetsCV() throws {
        try withStore { store, _ in
            try store.beginIndex(bucket: "notes")
            let first = try store.applyIndexPage(
                bucket: "notes", entries: [IndexEntry(key: "a", version: 1, data: ["x": 1]), IndexEntry(key: "b", version: 2, data: nil)],
                current: "cv9", isLast: false)
            #expect(first.reloads == [ReloadRequest(key: "b", version: 2)])
            #expect(try store.bucket(named: "notes")?.cv == nil)
            _ = try store.applyIndexPage(bucket: "notes", entries: [IndexEntry(key: "c", version: 1, data: ["y": 2])], current: "cv9", isLast: true)
            #expect(try store.bucket(named: "notes")?.cv == "cv9")
            #expect(try store.hasIndex(bucket: "notes"))
            _ = try seed(store, key: "b", version: 2, data: ["z": 3])
            #expect(try store.entries(bucket: "notes").map(\.name) == [.entity(key: "a"), .entity(key: "b"), .entity(key: "c")])
        }
    }

    @Test func reindexRemovesEntitiesGoneFromServerButKeepsPendingOnes() throws {
        try withStore { store, _ in
            try store.beginIndex(bucket: "notes")
            _ = try store.applyIndexPage(
                bucket: "notes",
                entries: [IndexEntry(key: "a", version: 1, data: ["x": 1]), IndexEntry(key: "b", version: 1, data: ["x": 1]), IndexEntry(key: "c", version: 1, data: ["x": 1])],
                current: "cv1", isLast: true)
            _ = try store.saveLocal(bucket: "notes", key: "b", value: ["x": 2])
            _ = try store.saveLocal(bucket: "notes", key: "new", value: ["n": 1])
            // cv:? -> reload the index; only "c" is still on the server.
            try store.beginIndex(bucket: "notes")
            let outcome = try store.applyIndexPage(bucket: "notes", entries: [IndexEntry(key: "c", version: 1, data: ["x": 1])], current: "cv2", isLast: true)
            // "a" is asked for at the version this store had (ReplicaReindexTests): the server
            // has it, so it removed "a" since.
            #expect(outcome.reloads == [ReloadRequest(key: "a", version: 1)])
            let removed = try store.applyEntity(bucket: "notes", key: "a", version: 1, data: ["x": 1])
            #expect(removed.events.map(\.key) == ["a"])
            #expect(try store.entity(bucket: "notes", key: "a") == nil)
            #expect(try store.entity(bucket: "notes", key: "b")?.value == ["x": 2])
            #expect(try store.entity(bucket: "notes", key: "new")?.value == ["n": 1])
            #expect(Set(try store.outgoingChanges(bucket: "notes").map(\.key)) == ["b", "new"])
            #expect(try store.bucket(named: "notes")?.cv == "cv2")
        }
    }

    @Test func localIndexListsVersionsAndPending() throws {
        try withStore { store, _ in
            _ = try seed(store, key: "a", version: 4, data: ["x": 1])
            let change = try #require(try store.saveLocal(bucket: "notes", key: "a", value: ["x": 2]).readyToSend)
            let index = try store.localIndex(bucket: "notes")
            #expect(index.index == [IndexSnapshot.Item(key: "a", version: 4)])
            #expect(index.pending == [IndexSnapshot.Pending(key: "a", sourceVersion: 4, ccid: change.ccid)])
        }
    }

    @Test func invalidFileKeepsItsBytesWhenRemoteChangeArrives() throws {
        try withStore { store, _ in
            _ = try seed(store, key: "k", version: 1, data: ["a": 1])
            _ = try store.saveLocal(bucket: "notes", key: "k", bytes: bytes("{oops"))
            _ = try store.applyRemote(
                bucket: "notes", changes: [RemoteChange(key: "k", operation: .modify(diff: wireDiff(["a": 1], ["a": 2])), sourceVersion: 1, endVersion: 2, cv: "c2")])
            let entity = try #require(try store.entity(bucket: "notes", key: "k"))
            #expect(entity.content == bytes("{oops"))
            #expect(entity.state == .invalid)
            #expect(entity.value == ["a": 2])
        }
    }
}
