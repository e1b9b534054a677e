import Glibc

/// The inode table's nodes by number, packed side by side in one array, with an index from
/// number to place, and their file names side by side in one buffer.
///
/// A dictionary of nodes keeps up to twice their count in slots, each as large as a node: at
/// 1,000,000 files, 2^21 slots of 128 bytes (268 MB). Packed, the nodes take 80 bytes each
/// (`PackedNode`: an access time or alias, which few nodes have, waits in `rarelySet`) and the
/// index 12 bytes a slot. A file name of a 32-character key kept as a String took ~80 bytes of
/// heap (a String's 32-byte header and a malloc chunk's rounding); in `names` it takes its
/// bytes (issue 40). A removal moves the last node into the gap, so the order is arbitrary;
/// nothing reads it.
struct PackedNodes: Sendable {
    private var packed: [PackedNode] = []
    private var places: [UInt64: UInt32] = [:]
    private var rarelySet: [UInt64: RarelySetAttributes] = [:]
    /// Every node's file name (`PackedNode.name`), one after the other; a name replaced or
    /// removed leaves its bytes unused until `compactNamesIfSparse` copies the live ones out.
    private var names: [UInt8] = []
    private var unusedNameBytes = 0

    var count: Int { packed.count }

    /// The bytes of the names buffer, and of them those a node has (for tests and reports).
    var nameBytes: Int { names.count }
    var liveNameBytes: Int { names.count - unusedNameBytes }

    subscript(ino: UInt64) -> Node? {
        get { places[ino].map { node(packed[Int($0)]) } }
        set {
            guard let newValue else {
                removeValue(forKey: ino)
                return
            }
            precondition(newValue.ino == ino, "a node is kept under its own number")
            let place = places[ino].map(Int.init)
            // Most stores of a node change an attribute, not its name: the name stays where it is.
            let name: NameSpan
            if let place, nameEquals(packed[place].name, newValue.fileName) {
                name = packed[place].name
            } else {
                if let place { unusedNameBytes += Int(packed[place].name.count) }
                name = appendName(newValue.fileName)
            }
            let (node, attributes) = newValue.packed(name: name)
            if attributes != nil || !rarelySet.isEmpty { rarelySet[ino] = attributes }
            if let place {
                packed[place] = node
            } else {
                places[ino] = UInt32(packed.count)
                packed.append(node)
            }
            compactNamesIfSparse()
        }
    }

    /// Changes node `ino` in place: one read and one store however many fields `body` sets
    /// (each read makes the node's name a String). Nil when there is no such node.
    @discardableResult
    mutating func modify<Result>(_ ino: UInt64, _ body: (inout Node) -> Result) -> Result? {
        guard var node = self[ino] else { return nil }
        let result = body(&node)
        self[ino] = node
        return result
    }

    /// Node `ino` as packed, its name left in the buffer: for reading an attribute or two on
    /// paths every request takes (`InodeTable`'s `lookups(of:)`, `aliasTarget(of:)`).
    func packedNode(_ ino: UInt64) -> (node: PackedNode, rarelySet: RarelySetAttributes?)? {
        guard let place = places[ino] else { return nil }
        let node = packed[Int(place)]
        return (node, node.hasRarelySet ? rarelySet[ino] : nil)
    }

    private func node(_ packed: PackedNode) -> Node {
        Node(packed, fileName: string(packed.name), packed.hasRarelySet ? rarelySet[packed.ino] : nil)
    }

    @discardableResult
    mutating func removeValue(forKey ino: UInt64) -> Node? {
        guard let place = places.removeValue(forKey: ino).map(Int.init) else { return nil }
        let removed = node(packed[place])
        if packed[place].hasRarelySet { rarelySet.removeValue(forKey: ino) }
        unusedNameBytes += Int(packed[place].name.count)
        let last = packed.removeLast()
        if place < packed.count {
            packed[place] = last
            places[last.ino] = UInt32(place)
        }
        compactNamesIfSparse()
        return removed
    }

    /// Room for `more` nodes beyond those kept (a listing about to be recorded), so the array
    /// and the index grow once rather than doubling through the listing.
    mutating func reserveCapacity(forMore more: Int) {
        guard more > 0 else { return }
        packed.reserveCapacity(packed.count + more)
        places.reserveCapacity(packed.count + more)
    }

    /// Gives back the room of nodes that left (a listing unloaded): arrays and dictionaries keep
    /// their capacity when emptied, and a million nodes' worth would stay.
    mutating func shrinkIfSparse() {
        places.giveBackRoomIfSparse()
        rarelySet.giveBackRoomIfSparse()
        compactNamesIfSparse()
        guard packed.capacity > 4 * packed.count + 1024 else { return }
        // A copy in the same order: the index still holds.
        var copy: [PackedNode] = []
        copy.reserveCapacity(packed.count)
        copy.append(contentsOf: packed)
        packed = copy
    }

    // MARK: Names

    /// Where a node's file name lies in `names`. Valid until the nodes change.
    struct NameSpan: Sendable {
        fileprivate var start: UInt32
        fileprivate let count: UInt32
    }

    /// The file name of node `ino` as kept, or nil when there is no such node: for comparing
    /// and ordering names (`precedes`) without making a String of each.
    func name(of ino: UInt64) -> NameSpan? {
        places[ino].map { packed[Int($0)].name }
    }

    /// Whether node `ino`'s file name is `name`, byte for byte (`JSONKey`'s equality).
    func hasName(_ ino: UInt64, _ name: String) -> Bool {
        guard let span = self.name(of: ino) else { return false }
        return nameEquals(span, name)
    }

    /// Byte order (code point order, `JSONKey`'s), as `ls` sorts.
    func precedes(_ lhs: NameSpan, _ rhs: NameSpan) -> Bool {
        names.withUnsafeBufferPointer { buffer in
            let base = buffer.baseAddress!
            let shorter = Int(min(lhs.count, rhs.count))
            let order = shorter == 0 ? 0 : memcmp(base + Int(lhs.start), base + Int(rhs.start), shorter)
            return order != 0 ? order < 0 : lhs.count < rhs.count
        }
    }

    /// Hash of the name's bytes, as `ChildNames.hash` hashes a String's.
    func hash(_ span: NameSpan) -> UInt32 {
        withBytes(span) { ChildNames.hash($0) }
    }

    private func string(_ span: NameSpan) -> String {
        withBytes(span) { String(decoding: $0, as: UTF8.self) }
    }

    private func withBytes<Result>(_ span: NameSpan, _ body: (UnsafeBufferPointer<UInt8>) -> Result) -> Result {
        names.withUnsafeBufferPointer { buffer in
            body(UnsafeBufferPointer(rebasing: buffer[Int(span.start)..<Int(span.start + span.count)]))
        }
    }

    private func nameEquals(_ span: NameSpan, _ name: String) -> Bool {
        var name = name
        return name.withUTF8 { wanted in
            guard wanted.count == Int(span.count) else { return false }
            return withBytes(span) { kept in wanted.isEmpty || memcmp(kept.baseAddress!, wanted.baseAddress!, wanted.count) == 0 }
        }
    }

    private mutating func appendName(_ name: String) -> NameSpan {
        var name = name
        let start = names.count
        name.withUTF8 { names.append(contentsOf: $0) }
        precondition(names.count <= Int(UInt32.max), "file names beyond 4 GiB")
        return NameSpan(start: UInt32(start), count: UInt32(names.count - start))
    }

    /// Once more than half the buffer is names no node has any more (renames, removals, a
    /// listing unloaded), the live ones move to a buffer of their size.
    private mutating func compactNamesIfSparse() {
        guard unusedNameBytes > 4096, unusedNameBytes > names.count / 2 else { return }
        var compacted: [UInt8] = []
        compacted.reserveCapacity(names.count - unusedNameBytes)
        for place in packed.indices {
            let span = packed[place].name
            let start = compacted.count
            compacted.append(contentsOf: names[Int(span.start)..<Int(span.start + span.count)])
            packed[place].name.start = UInt32(start)
        }
        names = compacted
        unusedNameBytes = 0
    }
}

extension Dictionary {
    /// A dictionary keeps its capacity when its entries go: once it holds less than a quarter
    /// of its room (and the room is worth giving back), it is rebuilt at its size.
    mutating func giveBackRoomIfSparse() {
        guard capacity > 4 * count + 1024 else { return }
        self = Dictionary(uniqueKeysWithValues: map { ($0.key, $0.value) })
    }
}
