/// The inode table's nodes by number, packed side by side in one array, with an index from
/// number to place.
///
/// A dictionary of nodes keeps up to twice their count in slots, each as large as a node: at
/// 1,000,000 files, 2^21 slots of 128 bytes (268 MB). Packed, the nodes take 88 bytes each
/// (`PackedNode`: an access time or alias, which few nodes have, waits in `rarelySet`) and the index 12 bytes a
/// slot: 113 MB (issue 40). A removal moves the last node into the gap, so the order is
/// arbitrary; nothing reads it.
struct PackedNodes: Sendable {
    private var packed: [PackedNode] = []
    private var places: [UInt64: UInt32] = [:]
    private var rarelySet: [UInt64: RarelySetAttributes] = [:]

    var count: Int { packed.count }

    subscript(ino: UInt64) -> Node? {
        get { places[ino].map { node(packed[Int($0)]) } }
        set {
            guard let newValue else {
                removeValue(forKey: ino)
                return
            }
            precondition(newValue.ino == ino, "a node is kept under its own number")
            let (node, attributes) = newValue.packed
            if attributes != nil || !rarelySet.isEmpty { rarelySet[ino] = attributes }
            if let place = places[ino] {
                packed[Int(place)] = node
            } else {
                places[ino] = UInt32(packed.count)
                packed.append(node)
            }
        }
    }

    private func node(_ packed: PackedNode) -> Node {
        Node(packed, packed.hasRarelySet ? rarelySet[packed.ino] : nil)
    }

    @discardableResult
    mutating func removeValue(forKey ino: UInt64) -> Node? {
        guard let place = places.removeValue(forKey: ino).map(Int.init) else { return nil }
        let removed = node(packed[place])
        if packed[place].hasRarelySet { rarelySet.removeValue(forKey: ino) }
        let last = packed.removeLast()
        if place < packed.count {
            packed[place] = last
            places[last.ino] = UInt32(place)
        }
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
        guard packed.capacity > 4 * packed.count + 1024 else { return }
        // A copy in the same order: the index still holds.
        var copy: [PackedNode] = []
        copy.reserveCapacity(packed.count)
        copy.append(contentsOf: packed)
        packed = copy
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
