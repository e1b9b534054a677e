import BucketFS
import Foundation
import SyncStore
import Testing

/// The hand-off of the mount's saves to the sync engine: a lone save goes at once, a burst goes
/// out together once the coalescing window is over, and a long burst of small batches in ever
/// longer windows.
@Suite(.timeLimit(.minutes(1)))
struct LocalSaveQueueTests {
    @Test func aBurstGoesOutAsOneBatchAndASaveAfterAQuietSpellAtOnce() async throws {
        let window = Duration.seconds(1)
        try await withQueue(coalescingWindow: window, longestWindow: window) { queue, clock, change, received in
            queue.add([try change("a")])
            #expect(await received.next() == ["a"])
            // Within the window of the last batch: held until the window ends, then sent together,
            // in order. The clock stands still until the queue is waiting, so all three are held.
            #expect(try await heldBatch(["b", "c", "d"], for: window, queue, clock, change, &received) == ["b", "c", "d"])

            // After a quiet spell, a save goes at once: the clock does not move again, so a save
            // that was held would never arrive (and the suite's time limit would fail the test).
            clock.advance(by: window + .milliseconds(200))
            queue.add([try change("e")])
            #expect(await received.next() == ["e"])
            #expect(clock.pendingDeadlines.isEmpty)
        }
    }

    @Test func eachWindowOfALongBurstIsTwiceTheOneBeforeUpToTheLongest() async throws {
        try await withQueue(coalescingWindow: .seconds(1), longestWindow: .seconds(3)) { queue, clock, change, received in
            queue.add([try change("a")])
            #expect(await received.next() == ["a"])
            // Each save comes within the window of the batch before it: the burst goes on.
            for (key, seconds) in [("b", 1), ("c", 2), ("d", 3), ("e", 3)] {
                #expect(try await heldBatch([key], for: .seconds(seconds), queue, clock, change, &received) == [key])
            }
            // A quiet spell longer than the last window ends the burst: the next save goes at
            // once, and one right after it waits for the first, shortest window again.
            clock.advance(by: .seconds(4))
            queue.add([try change("f")])
            #expect(await received.next() == ["f"])
            #expect(try await heldBatch(["g"], for: .seconds(1), queue, clock, change, &received) == ["g"])
        }
    }

    @Test func aLargeBatchEndsTheGrowthOfTheWindows() async throws {
        try await withQueue(coalescingWindow: .seconds(1), longestWindow: .seconds(8), largeBatch: 3) { queue, clock, change, received in
            queue.add([try change("a")])
            #expect(await received.next() == ["a"])
            #expect(try await heldBatch(["b"], for: .seconds(1), queue, clock, change, &received) == ["b"])
            // The window grew to 2 s; what comes in it is a large batch, which carries its own
            // cost: the next window is the shortest again.
            #expect(try await heldBatch(["c", "d", "e"], for: .seconds(2), queue, clock, change, &received) == ["c", "d", "e"])
            #expect(try await heldBatch(["f"], for: .seconds(1), queue, clock, change, &received) == ["f"])
        }
    }

    /// A queue on a clock moved by hand, consumed by a task that passes each batch's keys to
    /// `received`; `change(key)` saves an entity and returns its change.
    private func withQueue(
        coalescingWindow: Duration, longestWindow: Duration, largeBatch: Int = 32,
        _ body: (
            LocalSaveQueue<ManualClock>, ManualClock, (String) throws -> OutgoingChange,
            inout AsyncStream<[String]>.Iterator
        ) async throws -> Void
    ) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("bucketfs-test-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try SyncStore(path: directory.appendingPathComponent("store.sqlite").path)
        _ = try store.ensureBucket("notes")
        func change(_ key: String) throws -> OutgoingChange {
            try #require(try store.saveLocal(bucket: "notes", key: key, bytes: Array("{\"k\": 1}".utf8)).readyToSend)
        }
        let clock = ManualClock()
        let queue = LocalSaveQueue(coalescingWindow: coalescingWindow, longestWindow: longestWindow, largeBatch: largeBatch, clock: clock)
        let (batches, delivered) = AsyncStream<[String]>.makeStream()
        let consumer = Task { await queue.forEachBatch { delivered.yield($0.map(\.key)) } }
        defer { consumer.cancel() }
        var received = batches.makeAsyncIterator()
        try await body(queue, clock, change, &received)
        try store.close()
    }

    /// Saves `keys` within the window of the last batch, checks that the queue holds them for
    /// `window` (the clock stands still until it waits), moves the clock past it, and returns the
    /// batch that then goes out.
    private func heldBatch(
        _ keys: [String], for window: Duration, _ queue: LocalSaveQueue<ManualClock>, _ clock: ManualClock,
        _ change: (String) throws -> OutgoingChange, _ received: inout AsyncStream<[String]>.Iterator
    ) async throws -> [String]? {
        for key in keys { queue.add([try change(key)]) }
        let giveUp = ContinuousClock.now + .seconds(30)
        while clock.pendingDeadlines.isEmpty, ContinuousClock.now < giveUp { try await Task.sleep(for: .milliseconds(1)) }
        #expect(clock.pendingDeadlines == [clock.now.advanced(by: window)])
        clock.advance(by: window)
        return await received.next()
    }
}
