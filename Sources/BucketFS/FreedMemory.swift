import Dispatch
import Glibc
import Synchronization

/// Gives the memory a large note's save freed back to the system.
///
/// A note of several MiB is parsed, diffed, rendered and sent whole; glibc keeps what those
/// copies freed in its arenas for reuse, so a mount that once saved a 16 MiB note stayed
/// hundreds of MiB larger after the note was gone (issue 37). Once large work has settled (no
/// more for `settle`), `malloc_trim` hands the free pages back: one trim per burst.
enum FreedMemory {
    /// Work on fewer bytes leaves too little behind to be worth a trim.
    static let threshold = 1 << 20
    /// Long enough for a save's apply, send and acknowledgement to finish and free their copies, on a busy machine too.
    static let settle = DispatchTimeInterval.seconds(10)

    /// Bumped by each large piece of work: a trim goes ahead only if none came after it was planned.
    private static let generation = Atomic<UInt64>(0)
    private static let queue = DispatchQueue(label: "bucketfs.freed-memory", qos: .utility)
    /// glibc's `malloc_trim` (declared in malloc.h, which the Glibc module leaves out).
    private static let mallocTrim: (@convention(c) (Int) -> Int32)? = {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "malloc_trim") else { return nil }
        return unsafeBitCast(symbol, to: (@convention(c) (Int) -> Int32).self)
    }()

    /// glibc's `mallopt` (malloc.h too) and its `M_MMAP_THRESHOLD`.
    private static let mallopt: (@convention(c) (Int32, Int32) -> Int32)? = {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "mallopt") else { return nil }
        return unsafeBitCast(symbol, to: (@convention(c) (Int32, Int32) -> Int32).self)
    }()
    private static let mmapThresholdParameter: Int32 = -3

    /// Every block of `threshold` bytes or more is mapped on its own and unmapped when freed.
    /// glibc does so at first, but raises its threshold to the largest block freed (up to 32
    /// MiB), so after one note of several MiB the next ones' copies came from its arenas and
    /// stayed there: a mount that had saved twelve 14 MiB notes peaked at 985 MiB and kept 181
    /// MiB after they were removed; with the threshold fixed, 581 and 62 (issue 37,
    /// `scripts/bench-big-notes`). Smaller blocks, all a small note's, are as before.
    static func returnLargeBlocksWhenFreed() {
        _ = mallopt?(mmapThresholdParameter, Int32(threshold))
    }

    /// Notes work on `bytes` bytes; past the threshold a trim follows once large work has settled.
    static func afterWork(on bytes: Int) {
        guard bytes >= threshold else { return }
        let planned = generation.add(1, ordering: .relaxed).newValue
        queue.asyncAfter(deadline: .now() + settle) {
            guard generation.load(ordering: .relaxed) == planned else { return }
            _ = mallocTrim?(0)
        }
    }
}
