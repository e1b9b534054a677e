import Glibc

/// A directory's names: the numbers of the nodes in it, found by name, with names compared by
/// their bytes (`JSONKey`'s equality: `café.json` composed and decomposed are two names).
///
/// The names are the nodes' own, in `PackedNodes`: a `[JSONKey: UInt64]` kept 24 bytes a slot
/// (a String and a number), 2^21 slots for a bucket of 1,000,000 files; this keeps 12 (issue 40).
/// Open addressing with linear probing, at most half the slots full, each slot's name hash kept
/// beside its number (growing needs no name, and most probes compare no bytes); a removal
/// shifts the run after it back, so no slot is left marked as deleted.
///
/// What `InodeTable` keeps true: every number here is a node in `PackedNodes` under the name
/// it was put here with. A node leaves `PackedNodes` or takes another name only after leaving
/// here (or, for the directory's whole listing, with this table set aside).
struct ChildNames: Sendable {
    /// 0: an empty slot (no inode is numbered 0).
    private var inodes: [UInt64] = []
    private var hashes: [UInt32] = []
    private(set) var count = 0

    var isEmpty: Bool { count == 0 }

    /// Every number here, in no order.
    var inodeNumbers: LazyFilterSequence<[UInt64]> { inodes.lazy.filter { $0 != 0 } }

    static func hash(_ bytes: UnsafeBufferPointer<UInt8>) -> UInt32 {
        var hasher = Hasher()
        hasher.combine(bytes: UnsafeRawBufferPointer(bytes))
        return UInt32(truncatingIfNeeded: hasher.finalize())
    }

    static func hash(_ name: String) -> UInt32 {
        var name = name
        return name.withUTF8 { hash($0) }
    }

    func inode(named name: String, in nodes: PackedNodes) -> UInt64? {
        guard count > 0 else { return nil }
        let slot = slot(of: name, hash: Self.hash(name), in: nodes)
        return slot.found ? inodes[slot.index] : nil
    }

    /// Whether `ino` is here under the name whose hash is `hash`.
    func contains(_ ino: UInt64, hash: UInt32) -> Bool {
        guard count > 0 else { return false }
        let mask = inodes.count - 1
        var index = Int(hash) & mask
        while inodes[index] != 0 {
            if inodes[index] == ino { return true }
            index = (index + 1) & mask
        }
        return false
    }

    /// Puts `ino` under `name` (`ino` is, or is about to be, a node of that name), and returns
    /// the number that had the name.
    @discardableResult
    mutating func set(_ ino: UInt64, named name: String, in nodes: PackedNodes) -> UInt64? {
        precondition(ino != 0, "no inode is numbered 0")
        reserveCapacity(count + 1)
        let hash = Self.hash(name)
        let slot = slot(of: name, hash: hash, in: nodes)
        let previous = slot.found ? inodes[slot.index] : nil
        if !slot.found { count += 1 }
        inodes[slot.index] = ino
        hashes[slot.index] = hash
        return previous
    }

    /// Removes the name, returning the number it had.
    @discardableResult
    mutating func remove(named name: String, in nodes: PackedNodes) -> UInt64? {
        guard count > 0 else { return nil }
        let slot = slot(of: name, hash: Self.hash(name), in: nodes)
        guard slot.found else { return nil }
        let removed = inodes[slot.index]
        empty(slot.index)
        return removed
    }

    /// Removes the name only if `ino` has it.
    @discardableResult
    mutating func remove(_ ino: UInt64, named name: String, in nodes: PackedNodes) -> Bool {
        guard count > 0 else { return false }
        let slot = slot(of: name, hash: Self.hash(name), in: nodes)
        guard slot.found, inodes[slot.index] == ino else { return false }
        empty(slot.index)
        return true
    }

    /// Room for `wanted` names with at most half the slots full.
    mutating func reserveCapacity(_ wanted: Int) {
        guard wanted * 2 > inodes.count else { return }
        var capacity = max(8, inodes.count)
        while wanted * 2 > capacity { capacity *= 2 }
        rehash(into: capacity)
    }

    /// The slot that holds `name`, or the empty one where it would go.
    private func slot(of name: String, hash: UInt32, in nodes: PackedNodes) -> (index: Int, found: Bool) {
        let mask = inodes.count - 1
        var index = Int(hash) & mask
        while true {
            let ino = inodes[index]
            if ino == 0 { return (index, false) }
            if hashes[index] == hash, nodes.hasName(ino, name) { return (index, true) }
            index = (index + 1) & mask
        }
    }

    /// Empties a slot and moves back each entry after it that may sit there (its home slot is
    /// not between the hole and where it sits), so every probe still finds it.
    private mutating func empty(_ slot: Int) {
        let mask = inodes.count - 1
        var hole = slot
        var index = slot
        while true {
            index = (index + 1) & mask
            guard inodes[index] != 0 else { break }
            let home = Int(hashes[index]) & mask
            if (index &- home) & mask >= (index &- hole) & mask {
                inodes[hole] = inodes[index]
                hashes[hole] = hashes[index]
                hole = index
            }
        }
        inodes[hole] = 0
        hashes[hole] = 0
        count -= 1
        // A directory emptied of most of its names (a bucket's files removed) gives the room back.
        if inodes.count > 1024, count * 8 < inodes.count { rehash(into: max(8, inodes.count / 4)) }
    }

    private mutating func rehash(into capacity: Int) {
        let oldInodes = inodes
        let oldHashes = hashes
        inodes = Array(repeating: 0, count: capacity)
        hashes = Array(repeating: 0, count: capacity)
        let mask = capacity - 1
        for slot in oldInodes.indices where oldInodes[slot] != 0 {
            var index = Int(oldHashes[slot]) & mask
            while inodes[index] != 0 { index = (index + 1) & mask }
            inodes[index] = oldInodes[slot]
            hashes[index] = oldHashes[slot]
        }
    }
}
