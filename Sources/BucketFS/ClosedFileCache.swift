/// Bytes of recently closed, clean files, so that re-opening one (an editor's re-read, `grep`, a
/// build tool polling) needs no store read. Bounded by count and total size, oldest out first.
///
/// Every change to a file's bytes that does not go through an open working copy (remote changes,
/// rename, unlink, truncate of a closed file) removes its entry, so an entry always equals the
/// store's bytes.
struct ClosedFileCache: Sendable {
    private var entries: [UInt64: [UInt8]] = [:]
    /// Insertion order; entries removed meanwhile are skipped when it is trimmed.
    private var order: [UInt64] = []
    private var orderStart = 0
    private var totalBytes = 0
    let maximumCount: Int
    let maximumBytes: Int

    init(maximumCount: Int = 200_000, maximumBytes: Int = 64 << 20) {
        self.maximumCount = maximumCount
        self.maximumBytes = maximumBytes
    }

    var count: Int { entries.count }

    /// Remembers `bytes` as the store's content of `ino` (replacing an older entry).
    mutating func insert(_ ino: UInt64, bytes: [UInt8]) {
        guard bytes.count <= maximumBytes / 8 else { return remove(ino) }
        if let old = entries.updateValue(bytes, forKey: ino) {
            totalBytes -= old.count
        } else {
            order.append(ino)
        }
        totalBytes += bytes.count
        trim()
    }

    /// The cached bytes of `ino`, removed from the cache (they move into an open working copy).
    mutating func take(_ ino: UInt64) -> [UInt8]? {
        guard let bytes = entries.removeValue(forKey: ino) else { return nil }
        totalBytes -= bytes.count
        return bytes
    }

    mutating func remove(_ ino: UInt64) {
        _ = take(ino)
    }

    private mutating func trim() {
        while entries.count > maximumCount || totalBytes > maximumBytes, orderStart < order.count {
            let oldest = order[orderStart]
            orderStart += 1
            remove(oldest)
        }
        // Drop the consumed prefix (and ids removed meanwhile) once it dominates the array.
        if orderStart > 1024 && orderStart * 2 > order.count {
            compactOrder()
        } else if order.count > 4 * max(entries.count, 1024) {
            compactOrder()
        }
    }

    /// The order of the entries there are, each once, where it was last inserted. A file taken
    /// and put back (every open and close) is in `order` again each time: a filter that kept
    /// every such place of a cached file left `order` above its bound, and compacted it again
    /// at each insert (`grep -r` run four times over 20,000 files: 25 times slower each run).
    private mutating func compactOrder() {
        var seen = Set<UInt64>(minimumCapacity: entries.count)
        var kept: [UInt64] = []
        kept.reserveCapacity(entries.count)
        for ino in order[orderStart...].reversed() where entries[ino] != nil && seen.insert(ino).inserted {
            kept.append(ino)
        }
        order = kept.reversed()
        orderStart = 0
    }

    /// Places in the insertion order kept, for tests of its bound.
    var orderLength: Int { order.count - orderStart }
}
