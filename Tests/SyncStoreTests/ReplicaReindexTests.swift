import Foundation
import GRDB
import JSONDiff
import Testing
@testable import SyncStore

/// A re-index after `cv:?` treats the store as a replica (issue 35): a server restored from a
/// backup older than this store's acknowledged changes is sent them again, and nothing the user
/// saved disappears without a removal somewhere to explain it.
@Suite("re-index after cv:?: the store is a replica", .timeLimit(.minutes(1)))
struct ReplicaReindexTests {
    /// A store in sync at cv "c1" with `notes` at their versions, as after a first sync.
    static func synced(_ store: SyncStore, _ notes: [String: (version: Int, data: JSONObject)]) throws {
        try store.beginIndex(bucket: "notes")
        _ = try store.applyIndexPage(
            bucket: "notes", entries: notes.map { IndexEntry(key: $0.key, version: $0.value.version, data: $0.value.data) },
            current: "c1", isLast: true)
    }

    /// As `synced`, then each note's value made ours: saved here at version - 1 and acknowledged
    /// at its version, as after this mount's own change (`EntityRow.authored`).
    static func ours(_ store: SyncStore, _ notes: [String: (version: Int, data: JSONObject)]) throws {
        try synced(store, notes.mapValues { (version: $0.version - 1, data: ["before": true]) })
        for (key, note) in notes {
            let change = try #require(try store.saveLocal(bucket: "notes", key: key, value: note.data, markingSent: true).readyToSend)
            _ = try store.applyRemote(
                bucket: "notes",
                changes: [
                    RemoteChange(
                        key: key, operation: .modify(diff: wireDiff(["before": true], note.data)), sourceVersion: note.version - 1,
                        endVersion: note.version, cv: "c1", clientID: "us", ccids: [change.ccid])
                ])
            let entity = try #require(try store.entity(bucket: "notes", key: key))
            #expect(entity.version == note.version && entity.value == note.data && entity.state == .synced)
        }
    }

    /// `cv:?`, then the server's whole index in one page.
    static func reindex(_ store: SyncStore, _ index: [String: (version: Int, data: JSONObject)]) throws -> RemoteOutcome {
        try store.beginIndex(bucket: "notes")
        return try store.applyIndexPage(
            bucket: "notes", entries: index.map { IndexEntry(key: $0.key, version: $0.value.version, data: $0.value.data) },
            current: "c2", isLast: true)
    }

    /// Removes `key` here and has the server acknowledge it: the ghost was at `version`, the
    /// removal makes `version + 1`. `cv`: the acknowledgement's (nil: a mirror's counted versions).
    static func removeHere(_ store: SyncStore, _ key: String, at version: Int, cv: String? = "c9") throws {
        let removal = try #require(try store.deleteLocal(bucket: "notes", key: key))
        try store.markSent(ccids: [removal.ccid])
        _ = try store.applyRemote(
            bucket: "notes",
            changes: [
                RemoteChange(key: key, operation: .remove, sourceVersion: version, endVersion: version + 1, cv: cv, clientID: "us", ccids: [removal.ccid])
            ])
        #expect(try store.entity(bucket: "notes", key: key) == nil)
    }

    /// `outcome` sends the removal of `a` again, over the server's `version`, and shows no file.
    static func expectRemovalSentAgain(_ outcome: RemoteOutcome, over version: Int) throws {
        #expect(outcome.lostOnServer == ["a"])
        #expect(outcome.events.isEmpty, "no file comes back")
        let again = try #require(outcome.readyToSend.first)
        #expect(again.operation == .remove && again.sourceVersion == version)
    }

    /// `outcome` creates `a` again on the server from this store's `value`, which it keeps.
    static func expectCreatedAgain(_ outcome: RemoteOutcome, _ value: JSONObject, in store: SyncStore) throws {
        let create = try #require(outcome.readyToSend.first)
        #expect(create.sourceVersion == nil)
        #expect(create.operation == .modify(diff: wireDiff([:], value)))
        #expect(try store.entity(bucket: "notes", key: "a")?.value == value)
    }

    @Test func anEntityTheServerHoldsAtAnOlderVersionIsSentAgainOverIt() throws {
        try withStore { store, _ in
            try Self.ours(store, ["a": (2, ["n": 2, "t": "two"])])
            let bytesBefore = try store.readEntity(bucket: "notes", key: "a")
            let outcome = try Self.reindex(store, ["a": (1, ["n": 1, "t": "one"])])
            #expect(outcome.lostOnServer == ["a"])
            #expect(outcome.events.isEmpty, "the file is not touched")
            let change = try #require(outcome.readyToSend.first)
            #expect(change.key == "a")
            #expect(change.sourceVersion == 1)
            #expect(change.operation == .modify(diff: wireDiff(["n": 1, "t": "one"], ["n": 2, "t": "two"])))
            let entity = try #require(try store.entity(bucket: "notes", key: "a"))
            #expect(entity.value == ["n": 2, "t": "two"])
            #expect(entity.version == 1)
            #expect(entity.state == .pending)
            #expect(try store.readEntity(bucket: "notes", key: "a") == bytesBefore)
            #expect(try store.serverLoss(bucket: "notes")?.notes == 1, "for `bucketfs status`")
        }
    }

    @Test func theSameVersionWithOtherDataIsAForkAndOursIsSentOverIt() throws {
        try withStore { store, _ in
            try Self.ours(store, ["a": (2, ["n": 2])])
            let outcome = try Self.reindex(store, ["a": (2, ["n": 3, "by": "other"])])
            #expect(outcome.lostOnServer == ["a"])
            let change = try #require(outcome.readyToSend.first)
            #expect(change.sourceVersion == 2)
            #expect(change.operation == .modify(diff: wireDiff(["n": 3, "by": "other"], ["n": 2])))
        }
    }

    @Test func anEntityTheServerHoldsAtOursOrNewerIsNotSentAgain() throws {
        try withStore { store, _ in
            try Self.synced(store, ["a": (2, ["n": 2]), "b": (1, ["n": 1])])
            let outcome = try Self.reindex(store, ["a": (2, ["n": 2]), "b": (3, ["n": 5])])
            #expect(outcome.lostOnServer.isEmpty)
            #expect(outcome.readyToSend.isEmpty)
            #expect(try store.entity(bucket: "notes", key: "b")?.value == ["n": 5])
        }
    }

    @Test func anEntityMissingFromTheIndexIsAskedForAtOurVersion() throws {
        try withStore { store, _ in
            try Self.ours(store, ["lost": (2, ["n": 1]), "removed": (4, ["n": 4])])
            let outcome = try Self.reindex(store, [:])
            #expect(Set(outcome.reloads) == [ReloadRequest(key: "lost", version: 2), ReloadRequest(key: "removed", version: 4)])
            #expect(outcome.events.isEmpty, "nothing is removed before the server says so")
            #expect(try store.readEntity(bucket: "notes", key: "lost") != nil)

            // The server has version 4 of `removed`: it removed it since.
            let removed = try store.applyEntity(bucket: "notes", key: "removed", version: 4, data: ["n": 4])
            #expect(removed.events.map(\.kind) == [.removed])
            #expect(try store.entity(bucket: "notes", key: "removed") == nil)

            // It never had version 2 of `lost`: it is created again from our value.
            let lost = try store.applyEntity(bucket: "notes", key: "lost", version: 2, data: nil)
            #expect(lost.lostOnServer == ["lost"])
            #expect(lost.events.isEmpty)
            let create = try #require(lost.readyToSend.first)
            #expect(create.sourceVersion == nil)
            #expect(create.operation == .modify(diff: wireDiff([:], ["n": 1])))
            let entity = try #require(try store.entity(bucket: "notes", key: "lost"))
            #expect(entity.value == ["n": 1])
            #expect(entity.reason?.contains("lost") == true)
        }
    }

    @Test func aFirstSyncRemovesWhatTheIndexLacks() throws {
        try withStore { store, _ in
            // Entities from a first index that never finished: no cv yet, so no replica.
            try store.beginIndex(bucket: "notes")
            _ = try store.applyIndexPage(bucket: "notes", entries: [IndexEntry(key: "a", version: 1, data: ["n": 1])], current: "c1", isLast: false)
            try store.beginIndex(bucket: "notes")
            let outcome = try store.applyIndexPage(bucket: "notes", entries: [], current: "c2", isLast: true)
            #expect(outcome.reloads.isEmpty)
            #expect(outcome.events.map(\.kind) == [.removed])
        }
    }

    @Test func aLocalEditOfAnEntityMissingFromTheIndexIsKeptAndCreated() throws {
        try withStore { store, _ in
            try Self.synced(store, ["a": (1, ["n": 1])])
            _ = try store.saveLocal(bucket: "notes", key: "a", value: ["n": 2])
            let outcome = try Self.reindex(store, [:])
            #expect(outcome.reloads.isEmpty)
            let create = try #require(outcome.readyToSend.first { $0.key == "a" })
            #expect(create.sourceVersion == nil)
            #expect(try store.entity(bucket: "notes", key: "a")?.value == ["n": 2])
        }
    }
}

extension ReplicaReindexTests {
    @Test func aRemovalTheServerLostIsSentAgainAndNoFileComesBack() throws {
        try withStore { store, _ in
            try Self.ours(store, ["a": (3, ["n": 3]), "b": (1, ["n": 1])])
            // Removed here and acknowledged: the store forgets the entity (version 4 on the server).
            try Self.removeHere(store, "a", at: 3)

            // A server restored from before the removal lists `a` at version 2 or 3: the removal is sent again.
            let outcome = try Self.reindex(store, ["a": (3, ["n": 3]), "b": (1, ["n": 1])])
            #expect(outcome.lostOnServer == ["a"])
            #expect(outcome.events.isEmpty, "no file comes back")
            let again = try #require(outcome.readyToSend.first)
            #expect(again.key == "a")
            #expect(again.operation == .remove)
            #expect(again.sourceVersion == 3)
            #expect(try store.readEntity(bucket: "notes", key: "a") == nil)
            #expect(try store.entries(bucket: "notes").map(\.name) == [.entity(key: "b")])
        }
    }

    @Test func anEntityCreatedAgainAfterItsRemovalIsTaken() throws {
        try withStore { store, _ in
            try Self.synced(store, ["a": (3, ["n": 3])])
            _ = try store.applyRemote(
                bucket: "notes",
                changes: [RemoteChange(key: "a", operation: .remove, sourceVersion: 3, endVersion: 4, cv: "c9", clientID: "x", ccids: ["x1"])])
            let outcome = try Self.reindex(store, ["a": (5, ["n": "new"])])
            #expect(outcome.lostOnServer.isEmpty)
            #expect(outcome.readyToSend.isEmpty)
            #expect(try store.entity(bucket: "notes", key: "a")?.value == ["n": "new"])
        }
    }

    /// What another mount made and the server lost is that mount's to send again: a replica
    /// that only saw it follows the server meanwhile (a removal or an edit made since the restore
    /// must not be undone by every old copy; issue 35's model runs, seed 3).
    @Test func whatAnotherMountMadeIsNotSentAgainHere() throws {
        try withStore { store, _ in
            try Self.synced(store, ["older": (4, ["n": 4]), "gone": (2, ["n": 2]), "removedThere": (3, ["n": 3])])
            let outcome = try Self.reindex(store, ["older": (2, ["n": 2])])
            #expect(outcome.lostOnServer.isEmpty)
            #expect(outcome.readyToSend.isEmpty)
            let older = try #require(try store.entity(bucket: "notes", key: "older"))
            #expect(older.value == ["n": 2] && older.version == 2 && older.state == .synced, "the server's version shows")
            let file = try #require(try store.readEntity(bucket: "notes", key: "older"))
            #expect(object(String(decoding: file, as: UTF8.self)) == ["n": 2])

            // Absent from the index: asked for at our version, as for our own, and then removed
            // here whether the server removed it or lost it.
            #expect(Set(outcome.reloads) == [ReloadRequest(key: "gone", version: 2), ReloadRequest(key: "removedThere", version: 3)])
            let gone = try store.applyEntity(bucket: "notes", key: "gone", version: 2, data: nil)
            #expect(gone.readyToSend.isEmpty && gone.lostOnServer.isEmpty)
            #expect(gone.events.map(\.kind) == [.removed])
            let removed = try store.applyEntity(bucket: "notes", key: "removedThere", version: 3, data: ["n": 3])
            #expect(removed.events.map(\.kind) == [.removed])
            #expect(try store.entries(bucket: "notes").map(\.name) == [.entity(key: "older")])
        }
    }

    /// A removal seen from elsewhere is not sent again: the entity the index lists is taken.
    @Test func aRemovalMadeElsewhereIsNotSentAgain() throws {
        try withStore { store, _ in
            try Self.synced(store, ["a": (3, ["n": 3])])
            _ = try store.applyRemote(
                bucket: "notes",
                changes: [RemoteChange(key: "a", operation: .remove, sourceVersion: 3, endVersion: 4, cv: "c9", clientID: "x", ccids: ["x1"])])
            let outcome = try Self.reindex(store, ["a": (3, ["n": 3])])
            #expect(outcome.lostOnServer.isEmpty && outcome.readyToSend.isEmpty)
            #expect(try store.entity(bucket: "notes", key: "a")?.value == ["n": 3])
        }
    }

    /// A replica with an edit of its own sends it, over the server's version.
    @Test func anEditHereIsSentOverTheServersOlderVersion() throws {
        try withStore { store, _ in
            try Self.synced(store, ["a": (4, ["n": 4, "t": "x"])])
            _ = try store.saveLocal(bucket: "notes", key: "a", value: ["n": 4, "t": "y"])
            let outcome = try Self.reindex(store, ["a": (2, ["n": 2, "t": "x"])])
            let change = try #require(outcome.readyToSend.first)
            #expect(change.sourceVersion == 2)
            #expect(try store.entity(bucket: "notes", key: "a")?.value == ["n": 4, "t": "y"])
        }
    }

    /// A change of ours that comes back as a remote one (its acknowledgement lost to a
    /// reconnect, the catch-up bringing it) is ours too: its value and its removal are sent
    /// again after a restore that lost them.
    @Test func ourChangeArrivingAsARemoteOneIsOurs() throws {
        try withStore { store, _ in
            try Self.synced(store, ["a": (1, ["n": 1]), "b": (1, ["n": 1])])
            _ = try store.applyRemote(
                bucket: "notes",
                changes: [
                    RemoteChange(
                        key: "a", operation: .modify(diff: wireDiff(["n": 1], ["n": 2])), sourceVersion: 1, endVersion: 2, cv: "c2",
                        clientID: "us", ccids: ["lost-ack"]),
                    RemoteChange(key: "b", operation: .remove, sourceVersion: 1, endVersion: 2, cv: "c3", clientID: "us", ccids: ["lost-ack-2"]),
                ],
                ownClientID: "us")
            let outcome = try Self.reindex(store, ["a": (1, ["n": 1]), "b": (1, ["n": 1])])
            #expect(Set(outcome.lostOnServer) == ["a", "b"])
            #expect(Set(outcome.readyToSend.map(\.operation)) == [.modify(diff: wireDiff(["n": 1], ["n": 2])), .remove])
        }
    }

    /// Ours at a version the server lists newer, with other data: newer in our history, or a
    /// version of another one (a backup from before an earlier restore) reusing the number? Our
    /// version is asked for; the answer decides.
    @Test func aNewerVersionWithOtherDataIsCheckedAgainstOurs() throws {
        try withStore { store, _ in
            try Self.ours(store, ["a": (2, ["n": 75]), "b": (2, ["n": 8])])
            let outcome = try Self.reindex(store, ["a": (4, ["n": 1_000_001]), "b": (5, ["n": 9])])
            #expect(Set(outcome.reloads) == [ReloadRequest(key: "a", version: 2), ReloadRequest(key: "b", version: 2)])
            #expect(outcome.readyToSend.isEmpty && outcome.events.isEmpty, "nothing decided yet")
            #expect(try store.entity(bucket: "notes", key: "a")?.value == ["n": 75])

            // The server's version 2 of `a` is not ours: another history, which lost our value.
            let other = try store.applyEntity(bucket: "notes", key: "a", version: 2, data: ["n": 16])
            #expect(other.lostOnServer == ["a"])
            let resend = try #require(other.readyToSend.first)
            #expect(resend.sourceVersion == 4)
            #expect(resend.operation == .modify(diff: wireDiff(["n": 1_000_001], ["n": 75])))
            #expect(try store.entity(bucket: "notes", key: "a")?.value == ["n": 75])

            // The server has version 2 of `b` as we had it: its version 5 is newer; taken.
            let same = try store.applyEntity(bucket: "notes", key: "b", version: 2, data: ["n": 8])
            #expect(same.lostOnServer.isEmpty && same.readyToSend.isEmpty)
            let b = try #require(try store.entity(bucket: "notes", key: "b"))
            #expect(b.value == ["n": 9] && b.version == 5 && b.state == .synced)
        }
    }

    /// Missing from the re-index, then created again on the server before the answer about our
    /// version comes (its author sent it again): that creation is the entity from now on, even
    /// at a version number below ours, and the late answer changes nothing.
    @Test func anEntityCreatedAgainWhileItsVersionIsAskedForIsTaken() throws {
        try withStore { store, _ in
            try Self.synced(store, ["theirs": (7, ["n": 7])])
            try Self.ours(store, ["mine": (7, ["n": 7, "t": "mine"])])
            let outcome = try Self.reindex(store, [:])
            #expect(Set(outcome.reloads.map(\.key)) == ["theirs", "mine"])
            let recreated = try store.applyRemote(
                bucket: "notes",
                changes: [
                    RemoteChange(
                        key: "theirs", operation: .modify(diff: wireDiff([:], ["n": 8])), sourceVersion: nil, endVersion: 2, cv: "c3",
                        clientID: "other", ccids: ["o1"]),
                    RemoteChange(
                        key: "mine", operation: .modify(diff: wireDiff([:], ["n": 9])), sourceVersion: nil, endVersion: 2, cv: "c4",
                        clientID: "other", ccids: ["o2"]),
                ],
                ownClientID: "us")
            let theirs = try #require(try store.entity(bucket: "notes", key: "theirs"))
            #expect(theirs.value == ["n": 8] && theirs.version == 2 && theirs.state == .synced)
            // Ours merges in as a create made at the same time (its `t` kept, `n` ours).
            let mine = try #require(try store.entity(bucket: "notes", key: "mine"))
            #expect(mine.version == 2 && mine.value == ["n": 7, "t": "mine"])
            #expect(recreated.readyToSend.map(\.key) == ["mine"])

            let late = try store.applyEntity(bucket: "notes", key: "theirs", version: 7, data: nil)
            #expect(late.readyToSend.isEmpty && late.events.isEmpty)
            #expect(try store.entity(bucket: "notes", key: "theirs")?.value == ["n": 8])
        }
    }
}

/// Two restores in a row: a backup from before an earlier restore lists versions of the history
/// the earlier restore abandoned, numbered as the present one numbers others (issue 35's model
/// runs, seeds 1134540391 and 166244035).
extension ReplicaReindexTests {
    /// Our note was at version 12; a restore brought the server back to its version 3, ours was
    /// sent again (version 4) and removed here (version 5). A second restore, of a backup taken
    /// before the first, lists it at version 10 with a value from the history we knew up to
    /// version 12: that came before our removal, which is sent again.
    @Test func aRemovalFollowsTheHighestVersionThisStoreKnewAcrossRestores() throws {
        try withStore { store, _ in
            try Self.ours(store, ["a": (12, ["n": 72])])
            let first = try Self.reindex(store, ["a": (3, ["n": 6])])
            let resend = try #require(first.readyToSend.first)
            try store.markSent(ccids: [resend.ccid])
            _ = try store.applyRemote(
                bucket: "notes",
                changes: [
                    RemoteChange(
                        key: "a", operation: .modify(diff: wireDiff(["n": 6], ["n": 72])), sourceVersion: 3, endVersion: 4, cv: "c3",
                        clientID: "us", ccids: [resend.ccid])
                ])
            try Self.removeHere(store, "a", at: 4, cv: "c4")
            #expect(try store.lastVersionBeforeRemoval(bucket: "notes", key: "a") == 4, "the history lists the present server's versions")

            let second = try Self.reindex(store, ["a": (10, ["n": 39])])
            try Self.expectRemovalSentAgain(second, over: 10)
            #expect(try store.readEntity(bucket: "notes", key: "a") == nil)
        }
    }

    /// Past the highest version this store knew, the listed entity is someone's newer note.
    @Test func aVersionPastAnyThisStoreKnewIsTakenAfterItsRemoval() throws {
        try withStore { store, _ in
            try Self.ours(store, ["a": (3, ["n": 3])])
            try Self.removeHere(store, "a", at: 3, cv: "c4")
            let outcome = try Self.reindex(store, ["a": (6, ["n": "new"])])
            #expect(outcome.lostOnServer.isEmpty && outcome.readyToSend.isEmpty)
            #expect(try store.entity(bucket: "notes", key: "a")?.value == ["n": "new"])
        }
    }

    /// Issue 34's model run (seed 2484293109): two restores, from backups in reverse order. Our
    /// note was made again, with the data it had once, at the version number it had once, in the
    /// history the first restore began; the second restore's history holds that old version, with
    /// the same data, and a newer one. Data alone take the old version for ours; the change that
    /// made it (`e`'s `ccid`) says it is not: ours is sent again over the listed version, and the
    /// same when the note is missing from the index. With our own change named, it is ours.
    @Test(arguments: [false, true]) func theSameVersionAndDataMadeByAnotherChangeIsAnotherHistorys(missing: Bool) throws {
        try withStore { store, _ in
            try Self.ours(store, ["a": (1, ["n": 20])])
            let outcome = try Self.reindex(store, missing ? [:] : ["a": (3, ["n": 26])])
            #expect(outcome.reloads == [ReloadRequest(key: "a", version: 1)])
            let answer = try store.applyEntity(bucket: "notes", key: "a", version: 1, data: ["n": 20], madeBy: "another-change")
            #expect(answer.lostOnServer == ["a"])
            #expect(answer.events.isEmpty, "the file stays")
            let resend = try #require(answer.readyToSend.first)
            #expect(resend.sourceVersion == (missing ? nil : 3))
            #expect(try store.entity(bucket: "notes", key: "a")?.value == ["n": 20])
        }
        try withStore { store, _ in
            try Self.ours(store, ["a": (1, ["n": 20])])
            let ours = try #require(try store.read { db in try String.fetchOne(db, sql: "SELECT authored_ccid FROM entity") })
            _ = try Self.reindex(store, missing ? [:] : ["a": (3, ["n": 26])])
            let answer = try store.applyEntity(bucket: "notes", key: "a", version: 1, data: ["n": 20], madeBy: ours)
            #expect(answer.lostOnServer.isEmpty && answer.readyToSend.isEmpty)
            // Ours, then changed (listed) or removed (missing) since: that holds.
            #expect(try store.entity(bucket: "notes", key: "a")?.value == (missing ? nil : ["n": 26]))
        }
    }

    /// Missing from the index, and the server's version of our number is another history's
    /// value: the server never had ours, so it did not remove it; ours is created again.
    @Test func anEntityMissingFromAnotherHistoryIsCreatedAgain() throws {
        try withStore { store, _ in
            try Self.ours(store, ["a": (2, ["n": 1_000_001])])
            let outcome = try Self.reindex(store, [:])
            #expect(outcome.reloads == [ReloadRequest(key: "a", version: 2)])
            let answer = try store.applyEntity(bucket: "notes", key: "a", version: 2, data: ["n": 16])
            #expect(answer.lostOnServer == ["a"])
            #expect(answer.events.isEmpty, "the file stays")
            try Self.expectCreatedAgain(answer, ["n": 1_000_001], in: store)
        }
    }

    /// Our removal was acknowledged while the file had been made again (bytes not JSON: kept,
    /// not sent), so the row stayed; the file was then saved and removed before it ever reached
    /// the server. A server restored from before the removal lists the note again: the removal
    /// is remembered, and sent again (issue 35's model run, seed 3661928565).
    @Test func aRemovalAcknowledgedWhileTheFileWasMadeAgainIsRemembered() throws {
        try withStore { store, _ in
            try Self.ours(store, ["a": (2, ["n": 80])])
            let removal = try #require(try store.deleteLocal(bucket: "notes", key: "a"))
            try store.markSent(ccids: [removal.ccid])
            let invalid = try store.saveLocal(bucket: "notes", key: "a", bytes: Array("{not json".utf8))
            #expect(invalid.parseError != nil && invalid.readyToSend == nil)
            _ = try store.applyRemote(
                bucket: "notes",
                changes: [RemoteChange(key: "a", operation: .remove, sourceVersion: 2, endVersion: 3, cv: "c3", clientID: "us", ccids: [removal.ccid])])
            #expect(try store.readEntity(bucket: "notes", key: "a") == Array("{not json".utf8), "the bytes stay")
            _ = try store.saveLocal(bucket: "notes", key: "a", value: ["n": 96])
            _ = try store.deleteLocal(bucket: "notes", key: "a")
            #expect(try store.entity(bucket: "notes", key: "a") == nil)

            let outcome = try Self.reindex(store, ["a": (1, ["n": 11])])
            try Self.expectRemovalSentAgain(outcome, over: 1)
        }
    }

    /// As above, but the file made again is still here, its bytes not JSON (kept, never sent):
    /// the listed note is removed again on the server, the bytes stay, and a later valid save
    /// of the file is created anew once the removal is acknowledged.
    @Test func aRemovalTheServerLostIsSentAgainUnderAFileMadeSince() throws {
        try withStore { store, _ in
            try Self.ours(store, ["a": (2, ["n": 80])])
            try Self.removeHere(store, "a", at: 2, cv: "c3")
            _ = try store.saveLocal(bucket: "notes", key: "a", bytes: Array("{not json".utf8))

            let outcome = try Self.reindex(store, ["a": (1, ["n": 11])])
            #expect(outcome.lostOnServer == ["a"])
            #expect(outcome.events.isEmpty, "the file keeps its bytes")
            let again = try #require(outcome.readyToSend.first)
            #expect(again.operation == .remove && again.sourceVersion == 1)
            #expect(try store.readEntity(bucket: "notes", key: "a") == Array("{not json".utf8))

            // The file is saved valid before the removal is acknowledged: created anew after it.
            try store.markSent(ccids: [again.ccid])
            _ = try store.saveLocal(bucket: "notes", key: "a", value: ["n": 96])
            let acknowledged = try store.applyRemote(
                bucket: "notes",
                changes: [RemoteChange(key: "a", operation: .remove, sourceVersion: 1, endVersion: 2, cv: "c5", clientID: "us", ccids: [again.ccid])])
            try Self.expectCreatedAgain(acknowledged, ["n": 96], in: store)
        }
    }

    /// A server that lost our note (restored from a backup without it) has it created again
    /// from our copy; the user removes the file before that create goes out. A later restore, of
    /// a backup that holds the note, lists it again: the user's removal is sent (issue 35's model
    /// run, seed 945180396).
    @Test func aNoteRemovedBeforeItsCreateWentOutIsRemovedFromALaterRestore() throws {
        try withStore { store, _ in
            try Self.ours(store, ["a": (2, ["n": 66])])
            let first = try Self.reindex(store, [:])
            #expect(first.reloads == [ReloadRequest(key: "a", version: 2)])
            let lost = try store.applyEntity(bucket: "notes", key: "a", version: 2, data: nil)
            #expect(lost.readyToSend.first?.sourceVersion == nil, "created again")
            #expect(try store.deleteLocal(bucket: "notes", key: "a") == nil, "the create never went out: nothing to send")
            #expect(try store.entity(bucket: "notes", key: "a") == nil)

            let second = try Self.reindex(store, ["a": (1, ["n": 7])])
            try Self.expectRemovalSentAgain(second, over: 1)
        }
    }

    /// A note never on any server, removed before it was sent, leaves nothing to remember.
    @Test func aNewNoteRemovedBeforeItWentOutLeavesNoRemoval() throws {
        try withStore { store, _ in
            try Self.synced(store, [:])
            _ = try store.saveLocal(bucket: "notes", key: "fresh", value: ["n": 1])
            #expect(try store.deleteLocal(bucket: "notes", key: "fresh") == nil)
            let outcome = try Self.reindex(store, ["fresh": (1, ["n": "someone else's"])])
            #expect(outcome.lostOnServer.isEmpty && outcome.readyToSend.isEmpty)
            #expect(try store.entity(bucket: "notes", key: "fresh")?.value == ["n": "someone else's"])
        }
    }

    /// Removed here, the removal not yet sent, when a re-index shows the server lost the note:
    /// nothing to send now, but the removal stays ours, for a later restore of a backup that
    /// holds the note (issue 35's model run, seed 945180396).
    @Test func aPendingRemovalOfANoteTheServerLostStaysOurs() throws {
        try withStore { store, _ in
            try Self.ours(store, ["a": (2, ["n": 66])])
            _ = try store.deleteLocal(bucket: "notes", key: "a")
            let first = try Self.reindex(store, [:])
            #expect(first.readyToSend.isEmpty && first.reloads.isEmpty)
            #expect(try store.entity(bucket: "notes", key: "a") == nil)

            let second = try Self.reindex(store, ["a": (1, ["n": 7])])
            try Self.expectRemovalSentAgain(second, over: 1)
        }
    }

    /// A note made after a restore under the key of a note this store removed before it, at a
    /// version the removed note had too (the restored server numbers from its backup's, or from
    /// 1 when the backup never had the key): a new note, taken. Treating every such creation as
    /// the old history's, sent again by a catch-up, removed a mount's new note (sync-model seed
    /// 2044706901); so do versions a mirror counts (Telepat, Apptimist: no cv), which start
    /// again at 1 for a note made again.
    @Test(arguments: ["c5", nil] as [String?])
    func aNoteMadeUnderAKeyRemovedHereIsTaken(cv: String?) throws {
        try withStore { store, _ in
            try Self.ours(store, ["a": (2, ["n": 66])])
            try Self.removeHere(store, "a", at: 2, cv: cv == nil ? nil : "c3")
            let outcome = try store.applyRemote(
                bucket: "notes",
                changes: [
                    RemoteChange(
                        key: "a", operation: .modify(diff: wireDiff([:], ["n": "new"])), sourceVersion: nil, endVersion: 1, cv: cv,
                        clientID: "other", ccids: ["o1"])
                ])
            #expect(outcome.readyToSend.isEmpty && outcome.lostOnServer.isEmpty)
            #expect(try store.entity(bucket: "notes", key: "a")?.value == ["n": "new"])
        }
    }
}
