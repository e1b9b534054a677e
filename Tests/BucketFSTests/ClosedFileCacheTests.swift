import Testing

@testable import BucketFS

/// The closed-file cache: what goes in comes out once, and its bounds hold.
struct ClosedFileCacheTests {
    @Test func takeReturnsTheBytesOnce() {
        var cache = ClosedFileCache()
        cache.insert(7, bytes: [1, 2, 3])
        cache.insert(7, bytes: [4])
        #expect(cache.take(7) == [4])
        #expect(cache.take(7) == nil)
        cache.insert(8, bytes: [9])
        cache.remove(8)
        #expect(cache.take(8) == nil)
        #expect(cache.count == 0)
    }

    @Test func oldestEntriesLeaveFirstWhenFull() {
        var cache = ClosedFileCache(maximumCount: 3, maximumBytes: 1 << 20)
        for ino in UInt64(1)...5 { cache.insert(ino, bytes: [UInt8(ino)]) }
        #expect(cache.count == 3)
        #expect(cache.take(1) == nil && cache.take(2) == nil)
        #expect(cache.take(5) == [5])
    }

    @Test func sizeBoundHoldsAndHugeFilesAreNotKept() {
        var cache = ClosedFileCache(maximumCount: 1000, maximumBytes: 800)
        cache.insert(1, bytes: Array(repeating: 0, count: 101))  // over 1/8 of the budget
        #expect(cache.take(1) == nil)
        for ino in UInt64(1)...20 { cache.insert(ino, bytes: Array(repeating: 1, count: 100)) }
        #expect(cache.count == 8)
        #expect(cache.take(20)?.count == 100)
        // Many insert/take cycles keep the bookkeeping bounded and correct.
        for round in 0..<10_000 {
            let ino = UInt64(100 + round % 50)
            cache.insert(ino, bytes: [UInt8(round % 256)])
            if round % 3 == 0 { _ = cache.take(ino) }
        }
        #expect(cache.count <= 1000)
    }
    /// Files opened and closed over and over (each open takes the bytes, each close puts them
    /// back) keep the insertion order within its bound: it once grew by every put back, and
    /// each insert then walked all of it.
    @Test func takingAndPuttingBackKeepsTheOrderBounded() {
        var cache = ClosedFileCache(maximumCount: 100_000, maximumBytes: 64 << 20)
        for ino in UInt64(1)...5000 { cache.insert(ino, bytes: [1, 2, 3]) }
        for _ in 0..<10 {
            for ino in UInt64(1)...5000 {
                let bytes = cache.take(ino)
                #expect(bytes == [1, 2, 3])
                cache.insert(ino, bytes: bytes ?? [])
            }
        }
        #expect(cache.count == 5000)
        #expect(cache.orderLength <= 4 * 5000 + 1, "order \(cache.orderLength) for 5,000 entries")
    }
}
