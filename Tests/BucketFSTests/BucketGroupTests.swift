import BucketFS
import Foundation
import JSONDiff
import SyncStore
import Testing

/// Buckets named `group/leaf` (Telepat's `context/model`) show as two directory levels.
@Suite(.serialized, .timeLimit(.minutes(Patience.testMinutes)))
struct BucketGroupTests {
    func listing(_ path: String) throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: path).sorted()
    }

    @Test func groupedBucketsShowAsTwoLevelsAndNothingIsLost() throws {
        let mount = try MountFixture(buckets: ["notes", "shop/items", "shop/orders", "a b/c d"])
        defer { mount.close() }
        _ = try mount.store.saveLocal(bucket: "shop/items", key: "k1", value: ["name": .string("tea")], markingSent: false)
        _ = try mount.store.saveLocal(bucket: "shop/orders", key: "o1", value: ["n": .integer(2)], markingSent: false)

        // Each level is named as a bucket is: bytes outside [A-Za-z0-9._@-] escaped.
        #expect(try listing(mount.mountPoint) == ["a%20b", "notes", "shop"])
        #expect(try listing(mount.path("shop")) == ["items", "orders"])
        #expect(try listing(mount.path("a%20b")) == ["c%20d"])
        #expect(try Tool.run("/bin/cat", [mount.path("shop/items/k1.json")]).stdout == "{\n  \"name\": \"tea\"\n}\n")

        // getattr: the group and its buckets are directories, `..` of a bucket is its group.
        var isDirectory: ObjCBool = false
        #expect(FileManager.default.fileExists(atPath: mount.path("shop"), isDirectory: &isDirectory) && isDirectory.boolValue)
        #expect(FileManager.default.fileExists(atPath: mount.path("shop/orders"), isDirectory: &isDirectory) && isDirectory.boolValue)
        let inodes = try Tool.shell("stat -c %i shop shop/items/.. && find . -path ./notes -prune -o -type f -print | sort", in: mount.mountPoint)
        let lines = inodes.stdout.split(separator: "\n").map(String.init)
        #expect(lines.count == 4 && lines[0] == lines[1], "\(lines)")
        #expect(Array(lines.dropFirst(2)) == ["./shop/items/k1.json", "./shop/orders/o1.json"])

        // Saving in a grouped bucket reaches the store under the bucket's full name.
        try Tool.shell("printf '{\"name\": \"coffee\"}' > shop/items/k2.json", in: mount.mountPoint)
        #expect(try mount.store.entity(bucket: "shop/items", key: "k2") != nil)

        // Files cannot live in a group directory, and a group holds buckets one level deep.
        let fileInGroup = try Tool.shell("printf x > shop/file.json", in: mount.mountPoint, expectSuccess: false)
        #expect(fileInGroup.status != 0)
        let deeper = try Tool.shell("mkdir shop/items/sub", in: mount.mountPoint, expectSuccess: false)
        #expect(deeper.stderr.contains("Operation not permitted"))
        let slash = try Tool.shell("mkdir 'shop/x%2Fy'", in: mount.mountPoint, expectSuccess: false)
        #expect(slash.stderr.contains("Invalid argument"))

        // Remounted, everything is where it was.
        try mount.remount()
        #expect(try listing(mount.path("shop/items")) == ["k1.json", "k2.json"])
        #expect(try Tool.run("/bin/cat", [mount.path("shop/orders/o1.json")]).stdout == "{\n  \"n\": 2\n}\n")
    }

    @Test func mkdirAndRmdirInAGroupAddAndRemoveItsBuckets() throws {
        let mount = try MountFixture(buckets: ["shop/items"])
        defer { mount.close() }
        try Tool.shell("mkdir shop/orders", in: mount.mountPoint)
        #expect(try mount.store.bucket(named: "shop/orders") != nil)
        #expect(try listing(mount.path("shop")) == ["items", "orders"])

        // A group exists while it holds buckets: rmdir of it is ENOTEMPTY until the last goes.
        let group = try Tool.shell("rmdir shop", in: mount.mountPoint, expectSuccess: false)
        #expect(group.stderr.contains("not empty"))
        try Tool.shell("rmdir shop/orders && rmdir shop/items", in: mount.mountPoint)
        #expect(try mount.store.bucket(named: "shop/items") == nil)
        #expect(try listing(mount.mountPoint) == [])
    }

    @Test func aGroupedBucketMadeElsewhereAndItsRemoteChangesShowUp() throws {
        let mount = try MountFixture(buckets: ["shop/items"])
        defer { mount.close() }
        #expect(try listing(mount.path("shop")) == ["items"])
        // Another engine's bucket (a model subscribed since the group was listed): looked up by name.
        _ = try mount.store.ensureBucket("shop/orders")
        _ = try mount.store.ensureBucket("blog/posts")
        #expect(try listing(mount.path("shop")) == ["items", "orders"])
        #expect(FileManager.default.fileExists(atPath: mount.path("blog/posts")))

        #expect(try listing(mount.path("shop/items")) == [])
        let change = RemoteChange(
            key: "r", operation: .modify(diff: ["v": .object(["o": .string("+"), "v": .integer(1)])]), sourceVersion: nil,
            endVersion: 1, cv: "cv1")
        _ = try mount.store.applyRemote(bucket: "shop/items", changes: [change])
        #expect(try eventually { try Tool.run("/bin/cat", [mount.path("shop/items/r.json")]).stdout == "{\n  \"v\": 1\n}\n" })
        #expect(try listing(mount.path("shop/items")) == ["r.json"])
    }
}
