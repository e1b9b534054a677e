import Foundation
import JSONDiff
import Testing
@testable import SyncStore

@Suite("saveLocal / deleteLocal / local files", .timeLimit(.minutes(1)))
struct SaveLocalTests {
    @Test func savedBytesReadBackExactlyAndQueueAChange() throws {
        try withStore { store, _ in
            let text = "{ \"title\" :\"hello\"}"
            let result = try store.saveLocal(bucket: "notes", key: "a", bytes: bytes(text))
            #expect(result.parseError == nil)
            #expect(try store.readEntity(bucket: "notes", key: "a") == bytes(text))
            #expect(result.entity.state == .pending)
            let change = try #require(result.readyToSend)
            #expect(change.sourceVersion == nil)
            #expect(change.operation == .modify(diff: ["title": ["o": "+", "v": "hello"]]))
            #expect(try store.outgoingChanges(bucket: "notes") == [change])
        }
    }

    @Test func invalidJSONIsKeptAsBytesAndNotSent() throws {
        try withStore { store, _ in
            let result = try store.saveLocal(bucket: "notes", key: "broken", bytes: bytes("{\"a\": "))
            #expect(result.parseError != nil)
            #expect(result.readyToSend == nil)
            #expect(result.entity.state == .invalid)
            #expect(result.entity.reason?.isEmpty == false)
            #expect(try store.readEntity(bucket: "notes", key: "broken") == bytes("{\"a\": "))
            #expect(try store.outgoingChanges(bucket: "notes").isEmpty)
            let array = try store.saveLocal(bucket: "notes", key: "list", bytes: bytes("[1,2]"))
            #expect(array.entity.state == .invalid)
            // Fixing the file sends it.
            let fixed = try store.saveLocal(bucket: "notes", key: "broken", bytes: bytes("{\"a\": 1}"))
            #expect(fixed.entity.state == .pending)
            #expect(fixed.readyToSend != nil)
        }
    }

    @Test func unsentSavesCoalesceIntoOneChangeKeepingItsCCID() throws {
        try withStore { store, _ in
            let first = try #require(try store.saveLocal(bucket: "notes", key: "a", value: ["n": 1]).readyToSend)
            let second = try #require(try store.saveLocal(bucket: "notes", key: "a", value: ["n": 2]).readyToSend)
            #expect(first.ccid == second.ccid)
            #expect(second.operation == .modify(diff: ["n": ["o": "+", "v": 2]]))
            #expect(try store.outgoingChanges(bucket: "notes").count == 1)
        }
    }

    @Test func oneChangeInFlightPerEntityNextComputedAfterAck() throws {
        try withStore { store, _ in
            let first = try #require(try store.saveLocal(bucket: "notes", key: "a", value: ["n": 1]).readyToSend)
            try store.markSent(ccids: [first.ccid])
            let during = try store.saveLocal(bucket: "notes", key: "a", value: ["n": 3])
            // Only the change already in flight is reported (same ccid, still `sent`); no new one.
            #expect(during.readyToSend?.ccid == first.ccid)
            #expect(during.readyToSend?.state == .sent)
            #expect(try store.outgoingChanges(bucket: "notes").count == 1)
            #expect(during.entity.state == .pending)
            // The server acknowledges the first change (as its broadcast with our ccid).
            let ack = RemoteChange(
                key: "a", operation: .modify(diff: wireDiff([:], ["n": 1])), sourceVersion: nil, endVersion: 1,
                cv: "cv1", ccids: [first.ccid])
            let outcome = try store.applyRemote(bucket: "notes", changes: [ack])
            #expect(outcome.acknowledged == [first.ccid])
            let next = try #require(outcome.readyToSend.first)
            #expect(next.ccid != first.ccid)
            #expect(next.sourceVersion == 1)
            #expect(next.operation == .modify(diff: wireDiff(["n": 1], ["n": 3])))
            let entity = try #require(try store.entity(bucket: "notes", key: "a"))
            #expect(entity.version == 1)
            #expect(entity.ghost == ["n": 1])
            #expect(try store.bucket(named: "notes")?.cv == "cv1")
            // Our own acknowledged change is not a remote event for the file system.
            #expect(outcome.events.isEmpty)
        }
    }

    @Test func ackOfLastChangeMakesEntitySynced() throws {
        try withStore { store, _ in
            let change = try #require(try store.saveLocal(bucket: "notes", key: "a", value: ["n": 1]).readyToSend)
            try store.markSent(ccids: [change.ccid])
            _ = try store.applyRemote(
                bucket: "notes",
                changes: [RemoteChange(key: "a", operation: .modify(diff: wireDiff([:], ["n": 1])), sourceVersion: nil, endVersion: 1, cv: "c1", ccids: [change.ccid])])
            let entity = try #require(try store.entity(bucket: "notes", key: "a"))
            #expect(entity.state == .synced)
            #expect(try store.outgoingChanges(bucket: "notes").isEmpty)
        }
    }

    @Test func deleteOfNeverSentEntityForgetsIt() throws {
        try withStore { store, _ in
            _ = try store.saveLocal(bucket: "notes", key: "a", value: ["n": 1])
            #expect(try store.deleteLocal(bucket: "notes", key: "a") == nil)
            #expect(try store.entity(bucket: "notes", key: "a") == nil)
            #expect(try store.outgoingChanges(bucket: "notes").isEmpty)
            #expect(throws: StoreError.self) { try store.deleteLocal(bucket: "notes", key: "a") }
        }
    }

    @Test func deleteOfSyncedEntityQueuesRemovalAndHidesFile() throws {
        try withStore { store, _ in
            _ = try seed(store, key: "a", version: 3, data: ["n": 1])
            #expect(try store.syncState(bucket: "notes", key: "a").map { "\($0.state) \($0.version as Int?)" } == "synced Optional(3)")
            let removal = try #require(try store.deleteLocal(bucket: "notes", key: "a"))
            #expect(try store.syncState(bucket: "notes", key: "a") == nil, "removed here: no state to show")
            #expect(removal.operation == .remove)
            #expect(removal.sourceVersion == 3)
            #expect(try store.lookup(bucket: "notes", name: .entity(key: "a")) == nil)
            #expect(try store.entries(bucket: "notes").isEmpty)
            #expect(try store.entity(bucket: "notes", key: "a")?.deletedPending == true)
            try store.markSent(ccids: [removal.ccid])
            let outcome = try store.applyRemote(
                bucket: "notes",
                changes: [RemoteChange(key: "a", operation: .remove, sourceVersion: 3, endVersion: 4, cv: "c2", ccids: [removal.ccid])])
            #expect(outcome.acknowledged == [removal.ccid])
            #expect(try store.entity(bucket: "notes", key: "a") == nil)
        }
    }

    @Test func localFilesAreKeptAndNeverQueued() throws {
        try withStore { store, _ in
            let file = try store.writeLocalFile(bucket: "notes", name: ".a.json.swp", bytes: [0, 1, 2])
            #expect(try store.localFile(bucket: "notes", name: ".a.json.swp")?.content == [0, 1, 2])
            #expect(try store.outgoingChanges(bucket: "notes").isEmpty)
            let renamed = try store.rename(bucket: "notes", from: .localFile(name: ".a.json.swp"), to: .localFile(name: "x~"))
            #expect(renamed.changes.isEmpty)
            #expect(renamed.destination.id == file.id)
            #expect(try store.lookup(bucket: "notes", name: .localFile(name: "x~"))?.id == file.id)
            try store.removeLocalFile(bucket: "notes", name: "x~")
            #expect(try store.entries(bucket: "notes").isEmpty)
        }
    }

    @Test func renamingScratchOntoKeyIsOneSave() throws {
        try withStore { store, _ in
            _ = try store.saveLocal(bucket: "notes", key: "a", value: ["n": 1])
            let entityID = try #require(try store.entity(bucket: "notes", key: "a")?.id)
            let scratch = try store.writeLocalFile(bucket: "notes", name: "4913", bytes: bytes("{\"n\": 2}\n"))
            let renamed = try store.rename(bucket: "notes", from: .localFile(name: "4913"), to: .entity(key: "a"))
            #expect(renamed.changes.count == 1)
            // The same entity (its changes continue), now in the renamed file: its inode number.
            #expect(renamed.destination.id == scratch.id && renamed.destination.size == 9)
            #expect(try store.readEntity(bucket: "notes", key: "a") == bytes("{\"n\": 2}\n"))
            #expect(try store.localFile(bucket: "notes", name: "4913") == nil)
            #expect(try store.entity(bucket: "notes", key: "a")?.id == entityID)
            #expect(try store.lookup(bucket: "notes", name: .entity(key: "a"))?.id == scratch.id)
        }
    }

    @Test func renamingEntityToEntityIsCreatePlusRemove() throws {
        try withStore { store, _ in
            _ = try seed(store, key: "a", version: 1, data: ["n": 1])
            let renamed = try store.rename(bucket: "notes", from: .entity(key: "a"), to: .entity(key: "b"))
            #expect(Set(renamed.changes.map(\.key)) == ["a", "b"])
            #expect(try store.lookup(bucket: "notes", name: .entity(key: "a")) == nil)
            #expect(try store.entity(bucket: "notes", key: "b")?.value == ["n": 1])
        }
    }

    @Test func unknownBucketIsATypedError() throws {
        try withStore { store, _ in
            #expect(throws: StoreError.unknownBucket("nope")) {
                try store.saveLocal(bucket: "nope", key: "a", value: [:])
            }
        }
    }
}
