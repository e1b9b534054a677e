import Foundation
import GRDB
import Testing
@testable import SyncStore

/// An entity file's bytes live in a table of their own (`Schema` v15, issue 37): what changes
/// the row's value or sync state neither reads nor writes them, and a store from before keeps
/// every file as it was.
@Suite("entity bytes kept apart", .timeLimit(.minutes(2)))
struct EntityContentTests {
    /// Counts the writes of `entity_content` from here on (a trigger in the store's own file).
    static func countContentWrites(_ store: SyncStore) throws {
        try store.write { db in
            try db.execute(sql: """
                CREATE TABLE content_writes (n INTEGER NOT NULL);
                INSERT INTO content_writes VALUES (0);
                CREATE TRIGGER content_inserted AFTER INSERT ON entity_content BEGIN UPDATE content_writes SET n = n + 1; END;
                CREATE TRIGGER content_updated AFTER UPDATE ON entity_content BEGIN UPDATE content_writes SET n = n + 1; END;
                """)
        }
    }

    /// The change sent, and the server's echo of it applied.
    static func sendAndAcknowledge(_ change: OutgoingChange, _ store: SyncStore, version: Int) throws {
        guard case .modify(let diff) = change.operation else { throw StoreError.corruptRow("not a modify") }
        _ = try store.markSent([change])
        _ = try store.applyRemote(
            bucket: "notes",
            changes: [
                RemoteChange(
                    key: change.key, operation: .modify(diff: diff), sourceVersion: change.sourceVersion, endVersion: version,
                    cv: "c\(version)", clientID: "us", ccids: [change.ccid])
            ])
    }

    static func contentWrites(_ store: SyncStore) throws -> Int {
        try store.read { db in try Int.fetchOne(db, sql: "SELECT n FROM content_writes") ?? -1 }
    }

    /// A save writes the bytes once; sending its change, the server's acknowledgement and a
    /// change from elsewhere to another field touch the row alone, or (the change from
    /// elsewhere, which renders the file anew) the bytes once more.
    @Test func onlyWhatChangesTheFileWritesItsBytes() throws {
        try withStore { store, _ in
            try Self.countContentWrites(store)
            let saved = try store.saveLocal(bucket: "notes", key: "k", bytes: bytes(#"{"a": 1}"#))
            #expect(try Self.contentWrites(store) == 1)
            try Self.sendAndAcknowledge(try #require(saved.readyToSend), store, version: 1)
            #expect(try Self.contentWrites(store) == 1)
            #expect(try store.entity(bucket: "notes", key: "k")?.state == .synced)
            #expect(try store.readEntity(bucket: "notes", key: "k") == bytes(#"{"a": 1}"#))

            _ = try store.applyRemote(
                bucket: "notes",
                changes: [RemoteChange(key: "k", operation: .modify(diff: wireDiff(["a": 1], ["a": 1, "b": 2])), sourceVersion: 1, endVersion: 2, cv: "c2")])
            #expect(try Self.contentWrites(store) == 2)
            let entity = try #require(try store.entity(bucket: "notes", key: "k"))
            #expect(entity.value == ["a": 1, "b": 2] && object(String(decoding: entity.content, as: UTF8.self)) == ["a": 1, "b": 2])
            #expect(try store.lookup(bucket: "notes", name: .entity(key: "k"))?.size == entity.content.count)
        }
    }

    /// A removal takes the bytes with the file; a row deleted takes them too.
    @Test func aRemovedFileLeavesNoBytes() throws {
        try withStore { store, _ in
            let change = try #require(try store.saveLocal(bucket: "notes", key: "k", bytes: bytes(#"{"a": 1}"#)).readyToSend)
            try Self.sendAndAcknowledge(change, store, version: 1)
            _ = try store.saveLocal(bucket: "notes", key: "new", bytes: bytes(#"{"b": 1}"#))
            _ = try store.deleteLocal(bucket: "notes", key: "k")
            _ = try store.deleteLocal(bucket: "notes", key: "new")
            #expect(try store.readEntity(bucket: "notes", key: "k") == nil)
            #expect(try store.lookup(bucket: "notes", name: .entity(key: "k")) == nil)
            #expect(try store.entries(bucket: "notes").isEmpty)
            #expect(try store.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM entity_content") } == 0)
        }
    }

    /// A store from before (schema v14): every file keeps its bytes and size, a removed one
    /// stays without, bytes stored as text read back as they were, and a save that waited to be
    /// parsed still waits and is parsed.
    @Test func aStoreFromBeforeKeepsEveryFile() throws {
        let directory = try TemporaryDirectory()
        defer { directory.cleanup() }
        try writeStoreFromBefore(
            "v14 local value kept once", at: directory,
            """
            INSERT INTO bucket (id, name, ctime) VALUES (1, 'notes', 0);
            INSERT INTO entity (id, bucket_id, key, ghost_version, ghost_data, local_value, local_is_ghost, content, mtime, ctime,
                state, deleted_pending, needs_reload, seen_generation, node_id, unparsed)
            VALUES (2, 1, 'blob', 1, '{"n":1}', NULL, 1, X'7B226E223A317D0A', 5, 6, 'synced', 0, 0, 0, 2, 0),
                   (3, 1, 'removed', 1, '{"n":1}', NULL, 0, NULL, 5, 6, 'pending', 1, 0, 0, 3, 0),
                   (4, 1, 'text', 1, '{"t":1}', NULL, 1, '{"t": 1}', 5, 6, 'synced', 0, 0, 0, 4, 0),
                   (5, 1, 'waiting', NULL, '{}', NULL, 0, X'7B2277223A327D', 5, 6, 'pending', 0, 0, 0, 5, 1),
                   (6, 1, 'empty', NULL, '{}', NULL, 0, X'', 5, 6, 'invalid', 0, 0, 0, 6, 0);
            """)
        let store = try SyncStore(path: directory.storePath)
        defer { try? store.close() }
        #expect(try store.readEntity(bucket: "notes", key: "blob") == bytes("{\"n\":1}\n"))
        #expect(try store.readEntity(bucket: "notes", key: "text") == bytes(#"{"t": 1}"#))
        #expect(try store.readEntity(bucket: "notes", key: "removed") == nil)
        #expect(try store.readEntity(bucket: "notes", key: "empty") == [])
        let sizes = Dictionary(uniqueKeysWithValues: try store.entries(bucket: "notes").map { ($0.name, $0.size) })
        #expect(sizes == [.entity(key: "blob"): 8, .entity(key: "text"): 8, .entity(key: "waiting"): 7, .entity(key: "empty"): 0])
        #expect(try store.entitiesParsedLater().map(\.key) == ["waiting"])
        let finished = try #require(try store.finishDeferredParse(bucket: "notes", key: "waiting"))
        #expect(finished.readyToSend?.key == "waiting" && finished.byteCount == 7)
        #expect(try store.entity(bucket: "notes", key: "waiting")?.value == ["w": 2])
        #expect(try store.entity(bucket: "notes", key: "blob").map { ($0.content, $0.mtime, $0.value) } ?? ([], 0, nil) == (bytes("{\"n\":1}\n"), 5, ["n": 1]))
    }
    /// Files of 1 MiB and more are written and read by pieces (`IncrementalBlob`), smaller ones
    /// as one value: a file saved over and over across that size, from either side of it, reads
    /// back as saved, through the mount's read and the row's, and leaves no bytes once removed.
    @Test func filesAcrossTheBlobThresholdReadBackAsSaved() throws {
        try withStore { store, _ in
            let threshold = IncrementalBlob.threshold
            let note = { (length: Int, fill: UInt8) -> [UInt8] in
                Array(#"{"s": ""#.utf8) + [UInt8](repeating: fill, count: length - 9) + Array(#""}"#.utf8)
            }
            for (step, length) in [threshold + 3 * IncrementalBlob.pieceSize / 2, threshold - 1, threshold, 40, 3 * threshold + 7, threshold + 1].enumerated() {
                let bytes = note(length, UInt8(ascii: "a") + UInt8(step))
                _ = try store.saveLocal(bucket: "notes", key: "big", bytes: bytes)
                #expect(try store.readEntity(bucket: "notes", key: "big") == bytes, "\(length) bytes")
                #expect(try store.entity(bucket: "notes", key: "big")?.content == bytes, "\(length) bytes")
                #expect(try store.entity(bucket: "notes", key: "big")?.value == ["s": .string(String(repeating: Character(UnicodeScalar(UInt8(ascii: "a") + UInt8(step))), count: length - 9))])
            }
            _ = try store.deleteLocal(bucket: "notes", key: "big")
            #expect(try store.readEntity(bucket: "notes", key: "big") == nil)
            #expect(try store.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM entity_content") } == 0)
        }
    }
}
