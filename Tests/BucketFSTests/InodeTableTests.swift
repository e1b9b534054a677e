import Testing

@testable import BucketFS

/// Lookup counting and name bookkeeping without a mount.
struct InodeTableTests {
    func file(_ ino: UInt64, _ name: String, parent: UInt64 = 10) -> Node {
        Node(
            ino: ino, parent: parent, fileName: name, kind: .file(bucket: "b", item: .entity(key: name)), size: 1,
            mtime: 0, ctime: 0)
    }

    func tableWithBucket() -> InodeTable {
        var table = InodeTable(rootTime: 0)
        table.upsert(Node(ino: 10, parent: 1, fileName: "b", kind: .bucket(name: "b"), size: 0, mtime: 0, ctime: 0))
        return table
    }

    @Test func unlinkedNodeLivesUntilTheKernelForgetsIt() {
        var table = tableWithBucket()
        table.upsert(file(20, "a.json"))
        table.remember(20)
        table.remember(20)
        table.unlink(parent: 10, name: "a.json")
        #expect(table.child(of: 10, named: "a.json") == nil)
        #expect(table.record(20)?.linked == false)
        table.forget(20, count: 1)
        #expect(table.record(20) != nil)
        table.forget(20, count: 1)
        #expect(table.record(20) == nil)
    }

    @Test func forgettingMoreThanWasHandedOutStopsAtZeroWithoutATrap() {
        var table = tableWithBucket()
        table.upsert(file(20, "a.json"))
        table.remember(20)
        table.unlink(parent: 10, name: "a.json")
        let overdrawn = table.forget(20, count: 5)
        #expect(!overdrawn)
        #expect(table.record(20) == nil)
        let unknown = table.forget(20, count: 1)
        #expect(unknown, "an inode no longer known is forgotten quietly")
    }

    @Test func linkedNodesStayCachedAtZeroReferences() {
        var table = tableWithBucket()
        table.upsert(file(20, "a.json"))
        table.remember(20)
        table.forget(20, count: 1)
        #expect(table.child(of: 10, named: "a.json")?.ino == 20)
    }

    @Test func renameAliasFollowsTheNewInodeUntilForgotten() {
        var table = tableWithBucket()
        table.upsert(file(20, ".tmp"))
        table.remember(20)
        table.upsert(file(30, "a.json"))
        table.alias(20, to: 30)
        #expect(table.node(20)?.ino == 30)
        #expect(table.child(of: 10, named: ".tmp") == nil)
        table.forget(20, count: 1)
        #expect(table.record(20) == nil)
        #expect(table.node(30)?.fileName == "a.json")
    }

    @Test func listingReplacesVanishedNamesAndKeepsCounts() {
        var table = tableWithBucket()
        table.upsert(file(20, "a.json"))
        table.upsert(file(21, "b.json"))
        table.remember(21)
        table.replaceListing(of: 10, with: [file(20, "a.json"), file(22, "c.json")])
        #expect(table.isLoaded(10))
        #expect(Set(table.childInodes(of: 10).values) == [20, 22])
        #expect(table.record(21)?.linked == false)
        #expect(table.record(21)?.lookups == 1)
    }

    @Test func upsertUnderAnExistingNameDisplacesTheOldNode() {
        var table = tableWithBucket()
        table.upsert(file(20, "a.json"))
        table.upsert(file(21, "a.json"))
        #expect(table.child(of: 10, named: "a.json")?.ino == 21)
        #expect(table.record(20) == nil)
    }
}
