import Foundation
import GRDB
import JSONDiff
import Testing
@testable import SyncStore

/// A synced note's local value is the ghost's text, and the row keeps it once (`Schema` v14,
/// `EntityRow.localIsGhost`): what the store reads back is the same value, byte for byte, in
/// every state a row passes through.
@Suite("local value kept once", .timeLimit(.minutes(1)))
struct LocalValueKeptOnceTests {
    /// The two columns as stored, for `key`.
    func stored(_ store: SyncStore, _ key: String) throws -> (localValue: String?, localIsGhost: Bool) {
        try store.read { db in
            let row = try #require(try Row.fetchOne(db, sql: "SELECT local_value, local_is_ghost FROM entity WHERE key = ?", arguments: [key]))
            return (row["local_value"], row["local_is_ghost"])
        }
    }

    @Test func aSyncedNoteKeepsItsValueOnceAndAnEditKeepsBoth() throws {
        try withStore { store, _ in
            _ = try seed(store, key: "k", version: 1, data: ["a": 1])
            #expect(try stored(store, "k") == (nil, true))
            #expect(try store.entity(bucket: "notes", key: "k")?.value == ["a": 1])

            let change = try #require(try store.saveLocal(bucket: "notes", key: "k", value: ["a": 2]).readyToSend)
            #expect(try stored(store, "k") == (#"{"a":2}"#, false))
            try store.markSent([change])
            _ = try store.applyRemote(
                bucket: "notes",
                changes: [
                    RemoteChange(
                        key: "k", operation: .modify(diff: wireDiff(["a": 1], ["a": 2])), sourceVersion: 1, endVersion: 2,
                        cv: "c2", clientID: "us", ccids: [change.ccid])
                ])
            let entity = try #require(try store.entity(bucket: "notes", key: "k"))
            #expect(entity.state == .synced && entity.version == 2 && entity.value == ["a": 2])
            #expect(try stored(store, "k") == (nil, true), "acknowledged: once again")
        }
    }

    /// A save back to the server's value while an edit is in flight: the local value is the
    /// ghost's text until the acknowledgement moves the ghost on, and must then keep its own.
    @Test func aSaveBackToTheGhostWhileAnEditIsInFlightSurvivesItsAcknowledgement() throws {
        try withStore { store, _ in
            _ = try seed(store, key: "k", version: 1, data: ["a": 1])
            let change = try #require(try store.saveLocal(bucket: "notes", key: "k", value: ["a": 2]).readyToSend)
            try store.markSent([change])
            _ = try store.saveLocal(bucket: "notes", key: "k", value: ["a": 1])
            #expect(try stored(store, "k") == (nil, true))
            let outcome = try store.applyRemote(
                bucket: "notes",
                changes: [
                    RemoteChange(
                        key: "k", operation: .modify(diff: wireDiff(["a": 1], ["a": 2])), sourceVersion: 1, endVersion: 2,
                        cv: "c2", clientID: "us", ccids: [change.ccid])
                ])
            #expect(outcome.acknowledged == [change.ccid])
            let entity = try #require(try store.entity(bucket: "notes", key: "k"))
            #expect(entity.ghost == ["a": 2])
            #expect(entity.value == ["a": 1], "the save back is kept")
            #expect(try stored(store, "k") == (#"{"a":1}"#, false))
            let next = try #require(outcome.readyToSend.first)
            #expect(next.operation == .modify(diff: wireDiff(["a": 2], ["a": 1])))
        }
    }

    /// Canonically equivalent is not the same: a value that differs from the ghost only by
    /// the normalization of a string is the user's edit, and stays in its own column.
    @Test func aValueEqualToTheGhostOnlyUpToNormalizationIsKeptApart() throws {
        let composed = "caf\u{E9}"
        let decomposed = "cafe\u{301}"
        try withStore { store, _ in
            _ = try seed(store, key: "k", version: 1, data: ["t": .string(composed)])
            let change = try #require(try store.saveLocal(bucket: "notes", key: "k", value: ["t": .string(decomposed)]).readyToSend)
            #expect(try stored(store, "k").localIsGhost == false)
            let value = try #require(try store.entity(bucket: "notes", key: "k")?.value)
            guard case .string(let text) = value["t"] else { Issue.record("no string"); return }
            #expect(Array(text.utf8) == Array(decomposed.utf8))
            #expect(change.operation != .modify(diff: [:]))
        }
    }

    /// A store from before keeps its rows' values: equal texts are folded into one by the
    /// migration (byte for byte), the others stay as they were.
    @Test func theMigrationFoldsOnlyByteEqualValues() throws {
        let directory = try TemporaryDirectory()
        defer { directory.cleanup() }
        try writeStoreFromBefore(
            "v13 saves parsed later", at: directory,
            """
            INSERT INTO bucket (id, name, ctime) VALUES (1, 'notes', 0);
            INSERT INTO entity (id, bucket_id, key, ghost_version, ghost_data, local_value, content, mtime, ctime, state,
                deleted_pending, needs_reload, seen_generation, node_id)
            VALUES (2, 1, 'same', 1, '{"n":1}', '{"n":1}', X'7B7D', 0, 0, 'synced', 0, 0, 0, 2),
                   (3, 1, 'edited', 1, '{"n":1}', '{"n":2}', X'7B7D', 0, 0, 'pending', 0, 0, 0, 3),
                   (4, 1, 'nfd', 1, ?, ?, X'7B7D', 0, 0, 'pending', 0, 0, 0, 4),
                   (5, 1, 'removed', 1, '{"n":1}', NULL, NULL, 0, 0, 'pending', 1, 0, 0, 5);
            """,
            arguments: [#"{"t":"caf\#u{E9}"}"#, #"{"t":"cafe\#u{301}"}"#])
        let store = try SyncStore(path: directory.storePath)
        defer { try? store.close() }
        #expect(try stored(store, "same") == (nil, true))
        #expect(try stored(store, "edited") == (#"{"n":2}"#, false))
        #expect(try stored(store, "nfd") == (#"{"t":"cafe\#u{301}"}"#, false))
        #expect(try stored(store, "removed") == (nil, false))
        #expect(try store.entity(bucket: "notes", key: "same")?.value == ["n": 1])
        #expect(try store.entity(bucket: "notes", key: "edited")?.value == ["n": 2])
        #expect(try store.entity(bucket: "notes", key: "removed")?.value == nil)
    }
}
