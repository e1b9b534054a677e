import JSONDiff
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

    /// A listing leaves memory only once the kernel holds none of its nodes, linked or not (an
    /// unlinked one it still holds counts where it was), and never with a lock link in it.
    @Test func aListingLeavesMemoryOnlyWhenTheKernelHoldsNothingInIt() {
        var table = tableWithBucket()
        table.replaceListing(of: 10, with: [file(20, "a.json"), file(21, "b.json")])
        table.remember(10)
        table.remember(20)
        table.remember(21)
        #expect(table.holdsReferences(in: 10))
        #expect(table.holdsReferences(in: 1), "the bucket itself is held in the root")
        table.unlink(parent: 10, name: "b.json")
        table.forget(20, count: 1)
        #expect(table.holdsReferences(in: 10), "the removed file the kernel holds yet still counts")
        #expect(table.unload(10) == nil)
        table.forget(21, count: 1)
        #expect(!table.holdsReferences(in: 10))

        table.upsert(Node(ino: 1 << 62, parent: 10, fileName: ".#a.json", kind: .symlink(bucket: "b", name: ".#a.json", target: "x"), size: 1, mtime: 0, ctime: 0))
        #expect(table.unload(10) == nil, "a lock link lives only in memory")
        table.unlink(parent: 10, name: ".#a.json")

        let version = table.listingVersion(of: 10)
        #expect(table.unload(10) == 1)
        #expect(!table.isLoaded(10))
        #expect(table.record(20) == nil)
        #expect(table.child(of: 10, named: "a.json") == nil)
        #expect(table.listingVersion(of: 10) != version, "a listing the kernel cached is not kept over the reload")
        #expect(table.node(10)?.lookups == 1, "the bucket stays")
        table.replaceListing(of: 10, with: [file(20, "a.json")])
        #expect(table.child(of: 10, named: "a.json")?.ino == 20)

        // A file that moved into another directory counts there.
        table.upsert(Node(ino: 11, parent: 1, fileName: "c", kind: .bucket(name: "c"), size: 0, mtime: 0, ctime: 0))
        table.remember(20)
        table.upsert(file(20, "a.json", parent: 11))
        #expect(!table.holdsReferences(in: 10))
        #expect(table.holdsReferences(in: 11))
    }

    /// The packed store of nodes answers as a dictionary would through any mix of insertions,
    /// replacements and removals (a removal moves the last node into the gap).
    @Test func packedNodesAnswerAsADictionaryWould() {
        var packed = PackedNodes()
        var model: [UInt64: Node] = [:]
        var generator = SystemRandomNumberGenerator()
        for step in 0 ..< 5_000 {
            let ino = UInt64.random(in: 2 ... 300, using: &generator)
            switch Int.random(in: 0 ..< 3, using: &generator) {
            case 0, 1:
                let node = file(ino, "f\(step)")
                packed[ino] = node
                model[ino] = node
            default:
                #expect(packed.removeValue(forKey: ino) == model.removeValue(forKey: ino))
            }
            if step % 1_000 == 999 { packed.shrinkIfSparse() }
        }
        #expect(packed.count == model.count)
        for ino in UInt64(1) ... 301 { #expect(packed[ino] == model[ino]) }
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

    /// A remote change put another number under a name twice before the kernel looked the name
    /// up again (the middle number never reached it): the kernel's number follows to the last.
    @Test func aNameDisplacedTwiceLeadsTheKernelsNumberToTheLastFile() {
        var table = tableWithBucket()
        table.upsert(file(20, "a.json"))
        table.remember(20)
        table.alias(20, to: 21)
        table.upsert(file(21, "a.json"))
        table.alias(21, to: 22)
        table.upsert(file(22, "a.json"))
        #expect(table.record(21) == nil, "never handed to the kernel: gone")
        #expect(table.node(20)?.ino == 22)
        // Renamed since: the kernel's number follows it to its new name.
        table.unlink(parent: 10, name: "a.json")
        var renamed = file(22, "a.bak")
        renamed.kind = .file(bucket: "b", item: .localFile(name: "a.bak"))
        table.upsert(renamed)
        #expect(table.node(20)?.fileName == "a.bak")
        // Removed: the number means nothing any more, and is forgotten with the kernel's last reference.
        table.unlink(parent: 10, name: "a.bak")
        #expect(table.node(20) == nil)
        table.forget(20, count: 1)
        #expect(table.record(20) == nil)
    }

    @Test func aListingThatShowsAnotherNumberUnderANameAliasesTheOldOne() {
        var table = tableWithBucket()
        table.upsert(file(20, "a.json"))
        table.remember(20)
        table.replaceListing(of: 10, with: [file(21, "a.json")])
        #expect(table.child(of: 10, named: "a.json")?.ino == 21)
        #expect(table.node(20)?.ino == 21)
        #expect(table.record(20)?.linked == false)
    }

    /// A state whose bucket holds `a.json` as inode 20, which the kernel holds, removed
    /// elsewhere (`removedElsewhere`) or by this mount.
    func stateWithARemovedFile(elsewhere: Bool) -> FileSystemState {
        var state = FileSystemState(rootTime: 0)
        state.table = tableWithBucket()
        state.table.upsert(file(20, "a.json"))
        state.table.remember(20)
        state.table.unlink(parent: 10, name: "a.json")
        if elsewhere { state.table.noteRemovedElsewhere(20) }
        return state
    }

    @Test func aFileRemovedElsewhereIsTakenBackByAWriteWhileItsNameIsFree() {
        var state = stateWithARemovedFile(elsewhere: true)
        #expect(!state.relinkRemovedElsewhere(20).isEmpty, "the kernel must drop the name it holds as missing")
        #expect(state.table.child(of: 10, named: "a.json")?.ino == 20)
        #expect(state.unstoredEntities.contains(20), "the store makes it anew at its save")
        #expect(state.table.record(20)?.removedElsewhere == false)
    }

    @Test func aFileRemovedByThisMountIsNeverTakenBack() {
        var state = stateWithARemovedFile(elsewhere: false)
        #expect(state.relinkRemovedElsewhere(20).isEmpty)
        #expect(state.table.child(of: 10, named: "a.json") == nil)
    }

    @Test func aFileRemovedElsewhereWritesToTheNoteMadeAgainUnderItsName() {
        var state = stateWithARemovedFile(elsewhere: true)
        state.table.upsert(file(21, "a.json"))
        #expect(state.relinkRemovedElsewhere(20).isEmpty)
        #expect(state.table.node(20)?.ino == 21, "its save goes to the note under the name")
    }

    @Test func aFileRemovedElsewhereLeavesAFileMadeHereUnderItsNameAlone() {
        var state = stateWithARemovedFile(elsewhere: true)
        state.table.upsert(file(21, "a.json"))
        state.unstoredEntities.insert(21)
        #expect(state.relinkRemovedElsewhere(20).isEmpty)
        #expect(state.table.child(of: 10, named: "a.json")?.ino == 21)
        #expect(state.table.node(20)?.linked == false, "its bytes go nowhere, as on a local disk")
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

    /// Every way names come and go between listings, in long random runs: each listing of the
    /// directory holds exactly its names, sorted as `ls` sorts them (so `ls` of a big bucket
    /// sorts names that arrive in order), with `.` and `..` first. Runs of many changes between
    /// two listings pass the bound on the names the table keeps for the next merge.
    @Test(arguments: [(seed: UInt64(1), listEvery: 3), (seed: 2, listEvery: 40), (seed: 3, listEvery: 4_000)])
    func everyListingHoldsTheDirectorysNamesInOrder(seed: UInt64, listEvery: Int) throws {
        var random = SeededGenerator(seed: seed)
        var state = FileSystemState(rootTime: 0)
        state.table = tableWithBucket()
        // Few names, so they are made, removed and made again; some share long prefixes, some
        // are not ASCII, and some are the same text composed and decomposed (two names).
        let names = (0..<60).map { index in
            ["n\(index).json", "note-number-\(index % 7)-\(index)", "caf\u{E9}\(index % 10)", "cafe\u{301}\(index % 10)", "\(index)x"][index % 5]
        }
        var nextIno: UInt64 = 100
        var listings = 0
        for step in 0..<12_000 {
            let children = state.table.childInodes(of: 10)
            switch random.next() % 6 {
            case 0, 1:
                state.table.upsert(file(nextIno, names.randomElement(using: &random)!))
                nextIno += 1
            case 2:
                if let name = children.keys.randomElement(using: &random) { state.table.unlink(parent: 10, name: name.string) }
            case 3:
                if let (_, ino) = children.randomElement(using: &random) {
                    state.table.upsert(file(ino, names.randomElement(using: &random)!))
                }
            case 4:
                // The store's listing: some names kept (in any order), some new, some gone.
                var listing = children.filter { _ in random.next() % 4 != 0 }.map { file($0.value, $0.key.string) }
                for name in names where random.next() % 10 == 0 && children[JSONKey(name)] == nil {
                    listing.append(file(nextIno, name))
                    nextIno += 1
                }
                listing.shuffle(using: &random)
                state.table.replaceListing(of: 10, with: listing)
            default:
                if let (name, _) = children.randomElement(using: &random), let other = names.randomElement(using: &random),
                    JSONKey(other) != name
                {
                    state.table.upsert(file(nextIno, other))
                    nextIno += 1
                }
            }
            guard step % listEvery == listEvery - 1 || random.next() % UInt64(listEvery * 4) == 0 else { continue }
            listings += 1
            let bucket = try #require(state.table.node(10))
            let opened = state.openDirectory(bucket)
            guard case .directory(_, let items)? = state.handles[opened.handle] else {
                Issue.record("no directory handle")
                return
            }
            let expected = state.table.childInodes(of: 10).sorted { $0.key < $1.key }
            // By bytes: String's == would take a composed name for its decomposed twin.
            let listed: [JSONKey] = items.dropFirst(2).map { JSONKey(state.table.listedNode($0, in: 10)?.fileName ?? "(gone)") }
            let wanted: [JSONKey] = expected.map(\.key)
            #expect(listed == wanted, "step \(step)")
            #expect(Array(items.dropFirst(2)) == expected.map(\.value), "step \(step)")
            #expect(items.first == 10 && items.dropFirst().first == 1)
            if listed != wanted { return }
        }
        #expect(listings >= 2)
    }

    /// A node keeps an entity's key as part of its file name where it can (issue 40's memory
    /// per file): every kind reads back as it was given, under its name and after a rename.
    @Test(arguments: [
        ("0123456789abcdef0123456789abcdef.json", NodeKind.file(bucket: "b", item: .entity(key: "0123456789abcdef0123456789abcdef"))),
        ("a%252Fb.json", .file(bucket: "b", item: .entity(key: "a%2Fb"))),
        ("caf\u{E9}.json", .file(bucket: "b", item: .entity(key: "caf%C3%A9"))),
        ("plain", .file(bucket: "b", item: .entity(key: "plain"))),
        ("cafe\u{301}.json", .file(bucket: "b", item: .entity(key: "caf\u{E9}"))),
        (".notes.json.swp", .file(bucket: "b", item: .localFile(name: ".notes.json.swp"))),
        ("x.tmp", .file(bucket: "b", item: .localFile(name: "other name"))),
        (".#x.json", .symlink(bucket: "b", name: ".#x.json", target: "user@host.1:1")),
        ("b", .bucket(name: "b")),
    ])
    func aNodeGivesBackItsKindUnderItsNameAndAfterARename(fileName: String, kind: NodeKind) {
        var node = Node(ino: 20, parent: 10, fileName: fileName, kind: kind, size: 1, mtime: 0, ctime: 0)
        #expect(node.kind == kind)
        #expect(node.fileName == fileName)
        #expect(node.isFile == (kind.bucketFile != nil))
        node.fileName = "renamed-elsewhere.json"
        #expect(node.kind == kind, "a new name keeps the kind it was given")
        if case .file(let bucket, _) = kind {
            node.kind = .file(bucket: bucket, item: .entity(key: "renamed-elsewhere"))
            #expect(node.kind == .file(bucket: bucket, item: .entity(key: "renamed-elsewhere")))
        }
    }

    /// A loaded bucket holds one node per file: what it costs is what a million files cost.
    @Test func aPackedNodeTakesAtMost80Bytes() {
        #expect(MemoryLayout<PackedNode>.stride <= 80)
    }

    /// A directory's names, kept as the numbers of nodes whose names they are, answer as a
    /// dictionary by name would through long runs of adds, replacements and removals (grown
    /// past and shrunk back below its first sizes), with names told apart by their bytes.
    @Test(arguments: [UInt64(1), 2, 3])
    func childNamesAnswerAsADictionaryWould(seed: UInt64) {
        var random = SeededGenerator(seed: seed)
        var nodes = PackedNodes()
        var names = ChildNames()
        var model: [JSONKey: UInt64] = [:]
        let pool = (0..<3_000).map { index in ["n\(index).json", "caf\u{E9}\(index)", "cafe\u{301}\(index)", "\(index)"][index % 4] }
        var nextIno: UInt64 = 100
        for step in 0..<40_000 {
            // Mostly adds in the first half, mostly removals in the second.
            let adding = random.next() % 10 < (step < 20_000 ? 7 : 2)
            let name = pool[Int(random.next() % UInt64(step < 20_000 ? pool.count : 300))]
            if adding {
                let ino = nextIno
                nextIno += 1
                nodes[ino] = file(ino, name)
                let previous = names.set(ino, named: name, in: nodes)
                #expect(previous == model.updateValue(ino, forKey: JSONKey(name)), "step \(step)")
                if let previous { nodes.removeValue(forKey: previous) }
            } else if random.next() % 2 == 0 {
                let removed = names.remove(named: name, in: nodes)
                #expect(removed == model.removeValue(forKey: JSONKey(name)), "step \(step)")
                if let removed { nodes.removeValue(forKey: removed) }
            } else if let ino = model[JSONKey(name)] {
                let removedOther = names.remove(ino + 1, named: name, in: nodes)
                #expect(!removedOther, "only the number that has the name")
                let removedOwn = names.remove(ino, named: name, in: nodes)
                #expect(removedOwn)
                model.removeValue(forKey: JSONKey(name))
                nodes.removeValue(forKey: ino)
            }
            if step % 97 == 0 || step == 39_999 {
                #expect(names.count == model.count)
                #expect(Set(names.inodeNumbers) == Set(model.values))
                for probe in pool.prefix(400) {
                    #expect(names.inode(named: probe, in: nodes) == model[JSONKey(probe)], "step \(step): \(probe)")
                }
                for (name, ino) in model {
                    #expect(names.contains(ino, hash: nodes.hash(nodes.name(of: ino)!)), "\(name)")
                }
            }
        }
    }

    /// The nodes' names share one buffer: renamed and removed nodes leave bytes behind that
    /// are given back, and every node keeps its own name through that.
    @Test func namesLeftBehindAreGivenBackAndEveryNodeKeepsItsOwn() {
        var nodes = PackedNodes()
        for ino in UInt64(2)..<2_002 { nodes[ino] = file(ino, "\(ino)-first-name.json") }
        for round in 0..<20 {
            for ino in UInt64(2)..<2_002 where ino % 3 != 0 {
                guard var node = nodes[ino] else { continue }
                node.fileName = "\(ino)-name-\(round).json"
                nodes[ino] = node
            }
            for ino in UInt64(2)..<2_002 where ino % 7 == UInt64(round % 7) { nodes.removeValue(forKey: ino) }
            for ino in UInt64(2)..<2_002 where ino % 7 == UInt64((round + 3) % 7) && nodes[ino] == nil {
                nodes[ino] = file(ino, "\(ino)-again-\(round).json")
            }
        }
        for ino in UInt64(2)..<2_002 {
            guard let node = nodes[ino] else { continue }
            #expect(node.fileName.hasPrefix("\(ino)-"), "node \(ino) is named \(node.fileName)")
            #expect(nodes.hasName(ino, node.fileName))
        }
        #expect(nodes.nameBytes < 2 * nodes.liveNameBytes + 8_192, "the buffer holds \(nodes.nameBytes) bytes for \(nodes.liveNameBytes)")
    }

    /// An access time and an alias are kept apart from the packed nodes, for the few nodes that
    /// have them, and go when the node goes or no longer has them; permission bits stay inline.
    @Test func rarelySetAttributesStayWithTheirNodeOnly() {
        var nodes = PackedNodes()
        for ino in UInt64(20)..<30 { nodes[ino] = file(ino, "\(ino).json") }
        var chmodded = nodes[21]!
        chmodded.permissions = 0o600
        chmodded.atime = 5
        nodes[21] = chmodded
        var aliased = nodes[22]!
        aliased.aliasOf = 29
        nodes[22] = aliased
        #expect(nodes[21]?.permissions == 0o600 && nodes[21]?.atime == 5 && nodes[21]?.aliasOf == nil)
        #expect(nodes[22]?.aliasOf == 29 && nodes[22]?.permissions == nil)
        #expect(nodes[23]?.permissions == nil && nodes[23]?.atime == nil && nodes[23]?.aliasOf == nil)
        // The last node moves into a removed one's place; each keeps its own.
        nodes.removeValue(forKey: 21)
        #expect(nodes[21] == nil)
        nodes[21] = file(21, "21.json")
        #expect(nodes[21]?.permissions == nil && nodes[21]?.atime == nil, "a node made again starts without them")
        aliased.aliasOf = nil
        nodes[22] = aliased
        #expect(nodes[22]?.aliasOf == nil)
        for ino in UInt64(20)..<30 { #expect(nodes[ino]?.fileName == "\(ino).json") }
    }
}

extension NodeKind {
    fileprivate var bucketFile: MountItemName? {
        if case .file(_, let item) = self { return item }
        return nil
    }
}
