import Foundation
import JSONDiff
import SyncStore
import Testing
import TelepatProtocol
@testable import TelepatClient

/// What the Telepat engine makes of the server's `updated` patches, in a real store.
@Suite("Telepat notifications in the store", .timeLimit(.minutes(1)))
struct TelepatMirrorTests {
    /// `increment` adds, `append` appends (to an array, or a string to a string), as on the
    /// server; a patch the object cannot take leaves it as it was (a subscribe brings the
    /// server's object whole).
    @Test func incrementAndAppendPatchesApplyByTheirMeaning() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("telepat-mirror-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try SyncStore(path: directory.path + "/store.sqlite")
        defer { try? store.close() }
        let bucket = "Tasks/task"
        _ = try store.ensureBucket(bucket)
        let mirror = TelepatMirror(store: store)
        try mirror.apply(object: ["id": "o1", "n": 1, "ratio": 0.5, "tags": ["a"], "title": "ab", "modified": 1], bucket: bucket)

        func patch(_ operation: TelepatPatch.Operation, _ key: String, _ value: JSONValue?) -> TelepatPatch {
            TelepatPatch(operation, path: TelepatPatchPath(model: "task", id: "o1", key: key), value: value)
        }
        for each in [
            patch(.increment, "n", .integer(2)), patch(.increment, "ratio", .double(0.25)), patch(.increment, "fresh", .integer(-3)),
            patch(.append, "tags", "b"), patch(.append, "title", "cd"), patch(.append, "list", .integer(1)),
            patch(.replace, "modified", .integer(2)), patch(.remove, "gone", nil),
        ] {
            try mirror.apply(patch: each, bucket: bucket)
        }
        let expected: JSONObject = [
            "id": "o1", "n": 3, "ratio": 0.75, "fresh": -3, "tags": ["a", "b"], "title": "abcd", "list": [1], "modified": 2,
        ]
        #expect(try store.entity(bucket: bucket, key: "o1")?.value == expected)
        #expect(try store.entity(bucket: bucket, key: "o1")?.ghost == expected)

        let version = try store.entity(bucket: bucket, key: "o1")?.version
        try mirror.apply(patch: patch(.increment, "title", .integer(1)), bucket: bucket)
        try mirror.apply(patch: patch(.append, "n", "x"), bucket: bucket)
        #expect(try store.entity(bucket: bucket, key: "o1")?.value == expected)
        #expect(try store.entity(bucket: bucket, key: "o1")?.version == version)
    }

    /// A removal arrives as `replace` with null (Telepat 0.4 has no property removal; issue 36):
    /// the mount shows the key removed, as it was where the removal was made.
    @Test func aReplaceWithNullRemovesTheKey() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("telepat-mirror-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try SyncStore(path: directory.path + "/store.sqlite")
        defer { try? store.close() }
        let bucket = "Tasks/task"
        _ = try store.ensureBucket(bucket)
        let mirror = TelepatMirror(store: store)
        try mirror.apply(object: ["id": "o1", "title": "ab", "done": false], bucket: bucket)
        try mirror.apply(patch: TelepatPatch(.replace, path: TelepatPatchPath(model: "task", id: "o1", key: "title"), value: .null), bucket: bucket)
        #expect(try store.entity(bucket: bucket, key: "o1")?.value == ["id": "o1", "done": false])
        #expect(try store.entity(bucket: bucket, key: "o1")?.ghost == ["id": "o1", "done": false])
    }
}
