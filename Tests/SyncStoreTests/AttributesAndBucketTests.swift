import Foundation
import JSONDiff
import Testing
@testable import SyncStore

@Suite("modification times, rename times, bucket removal", .timeLimit(.minutes(1)))
struct AttributesAndBucketTests {
    @Test func modificationTimeIsPersistedAcrossReopenForEntitiesAndLocalFiles() throws {
        let directory = try TemporaryDirectory()
        defer { directory.cleanup() }
        let entityTime: StoreTime = 1_234_567_890_123_456_789
        let fileTime: StoreTime = 987_654_321_000_000_001
        do {
            let store = try SyncStore(path: directory.storePath)
            _ = try store.ensureBucket("notes")
            _ = try store.saveLocal(bucket: "notes", key: "k", bytes: bytes(#"{"a":1}"#))
            _ = try store.writeLocalFile(bucket: "notes", name: ".k.swp", bytes: [1, 2, 3])
            let before = try #require(try store.entity(bucket: "notes", key: "k"))
            try store.setModificationTime(bucket: "notes", name: .entity(key: "k"), mtime: entityTime)
            try store.setModificationTime(bucket: "notes", name: .localFile(name: ".k.swp"), mtime: fileTime)
            let after = try #require(try store.entity(bucket: "notes", key: "k"))
            #expect(after.mtime == entityTime)
            #expect(after.ctime >= before.ctime)
            #expect(after.content == before.content)
            #expect(after.state == before.state)
            try store.close()
        }
        let reopened = try SyncStore(path: directory.storePath)
        #expect(try reopened.entity(bucket: "notes", key: "k")?.mtime == entityTime)
        #expect(try reopened.localFile(bucket: "notes", name: ".k.swp")?.mtime == fileTime)
        #expect(try reopened.lookup(bucket: "notes", name: .entity(key: "k"))?.mtime == entityTime)
        let listed = try reopened.entries(bucket: "notes").first { $0.name == .localFile(name: ".k.swp") }
        #expect(listed?.mtime == fileTime)
        try reopened.close()
    }

    @Test func settingTheTimeOfSomethingMissingIsATypedError() throws {
        try withStore { store, _ in
            #expect(throws: StoreError.unknownEntity(bucket: "notes", key: "nope")) {
                try store.setModificationTime(bucket: "notes", name: .entity(key: "nope"), mtime: 1)
            }
            #expect(throws: StoreError.unknownLocalFile(bucket: "notes", name: "nope")) {
                try store.setModificationTime(bucket: "notes", name: .localFile(name: "nope"), mtime: 1)
            }
            #expect(throws: StoreError.unknownBucket("other")) {
                try store.setModificationTime(bucket: "other", name: .entity(key: "k"), mtime: 1)
            }
            // A locally deleted entity has no file, so no time either.
            _ = try store.saveLocal(bucket: "notes", key: "gone", bytes: bytes(#"{"a":1}"#))
            _ = try store.deleteLocal(bucket: "notes", key: "gone")
            #expect(throws: StoreError.unknownEntity(bucket: "notes", key: "gone")) {
                try store.setModificationTime(bucket: "notes", name: .entity(key: "gone"), mtime: 1)
            }
        }
    }

    @Test func renameKeepsTheSourceModificationTimeForEveryKindOfRename() throws {
        try withStore { store, _ in
            // rsync -a: write a temp file, set its mtime, rename it onto the entity.
            _ = try store.writeLocalFile(bucket: "notes", name: ".a.json.tmp", bytes: bytes(#"{"a":1}"#))
            try store.setModificationTime(bucket: "notes", name: .localFile(name: ".a.json.tmp"), mtime: 111)
            _ = try store.rename(bucket: "notes", from: .localFile(name: ".a.json.tmp"), to: .entity(key: "a"))
            #expect(try store.entity(bucket: "notes", key: "a")?.mtime == 111)
            #expect(try store.entity(bucket: "notes", key: "a")?.value == ["a": 1])

            // Entity onto entity.
            try store.setModificationTime(bucket: "notes", name: .entity(key: "a"), mtime: 222)
            _ = try store.rename(bucket: "notes", from: .entity(key: "a"), to: .entity(key: "b"))
            #expect(try store.entity(bucket: "notes", key: "b")?.mtime == 222)

            // Entity onto a local file, and local file onto local file.
            _ = try store.rename(bucket: "notes", from: .entity(key: "b"), to: .localFile(name: "b~"))
            #expect(try store.localFile(bucket: "notes", name: "b~")?.mtime == 222)
            try store.setModificationTime(bucket: "notes", name: .localFile(name: "b~"), mtime: 333)
            _ = try store.rename(bucket: "notes", from: .localFile(name: "b~"), to: .localFile(name: "c~"))
            #expect(try store.localFile(bucket: "notes", name: "c~")?.mtime == 333)
        }
    }

    @Test func onlyAnEmptyBucketIsRemoved() throws {
        try withStore { store, _ in
            _ = try store.ensureBucket("todo")
            let firstID = try #require(try store.bucket(named: "todo")?.id)
            _ = try store.saveLocal(bucket: "todo", key: "k", bytes: bytes(#"{"a":1}"#))
            #expect(throws: StoreError.bucketNotEmpty("todo")) { try store.removeBucket(named: "todo") }

            // Deleted locally but the removal is not acknowledged yet: kept (the entity reached
            // the server once, so its removal is owed), and said so apart from "not empty".
            _ = try store.applyRemote(
                bucket: "todo",
                changes: [RemoteChange(key: "r", operation: .modify(diff: wireDiff([:], ["x": 1])), sourceVersion: nil, endVersion: 1, cv: "c1")])
            _ = try store.deleteLocal(bucket: "todo", key: "r")
            _ = try store.deleteLocal(bucket: "todo", key: "k")
            #expect(try store.entries(bucket: "todo").isEmpty)
            #expect(throws: StoreError.bucketAwaitsRemovals("todo")) { try store.removeBucket(named: "todo") }
            let removal = try #require(try store.outgoingChanges(bucket: "todo").first)
            _ = try store.applyRemote(
                bucket: "todo",
                changes: [RemoteChange(key: "r", operation: .remove, sourceVersion: 1, endVersion: 2, cv: "c2", ccids: [removal.ccid])])

            _ = try store.writeLocalFile(bucket: "todo", name: "scratch", bytes: [0])
            #expect(throws: StoreError.bucketNotEmpty("todo")) { try store.removeBucket(named: "todo") }
            try store.removeLocalFile(bucket: "todo", name: "scratch")

            try store.removeBucket(named: "todo")
            #expect(try store.bucket(named: "todo") == nil)
            #expect(try store.buckets().map(\.name) == ["notes"])
            #expect(throws: StoreError.unknownBucket("todo")) { try store.removeBucket(named: "todo") }
            // A bucket made again is a new node: ids are never reused.
            #expect(try store.ensureBucket("todo").id != firstID)
        }
    }
}
