import BucketFS
import Foundation
import SyncStore
import Testing

/// The hand-off of the mount's saves to the sync engine: a lone save goes at once, a burst goes
/// out together once the coalescing window is over.
@Suite(.timeLimit(.minutes(1)))
struct LocalSaveQueueTests {
    @Test func aBurstGoesOutAsOneBatchAndASaveAfterAQuietSpellAtOnce() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("bucketfs-test-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try SyncStore(path: directory.appendingPathComponent("store.sqlite").path)
        _ = try store.ensureBucket("notes")
        func change(_ key: String) throws -> OutgoingChange {
            try #require(try store.saveLocal(bucket: "notes", key: key, bytes: Array("{\"k\": 1}".utf8)).readyToSend)
        }

        let window = Duration.seconds(1)
        let clock = ManualClock()
        let queue = LocalSaveQueue(coalescingWindow: window, clock: clock)
        let (batches, delivered) = AsyncStream<[String]>.makeStream()
        let consumer = Task { await queue.forEachBatch { delivered.yield($0.map(\.key)) } }
        defer { consumer.cancel() }
        var received = batches.makeAsyncIterator()

        queue.add([try change("a")])
        #expect(await received.next() == ["a"])
        // Within the window of the last batch: held until the window ends, then sent together,
        // in order. The clock stands still until the queue is waiting, so all three are held.
        for key in ["b", "c", "d"] { queue.add([try change(key)]) }
        let giveUp = ContinuousClock.now + .seconds(30)
        while clock.pendingDeadlines.isEmpty, ContinuousClock.now < giveUp { try await Task.sleep(for: .milliseconds(1)) }
        #expect(clock.pendingDeadlines == [clock.now.advanced(by: window)])
        clock.advance(by: window)
        #expect(await received.next() == ["b", "c", "d"])

        // After a quiet spell, a save goes at once: the clock does not move again, so a save
        // that was held would never arrive (and the suite's time limit would fail the test).
        clock.advance(by: window + .milliseconds(200))
        queue.add([try change("e")])
        #expect(await received.next() == ["e"])
        #expect(clock.pendingDeadlines.isEmpty)
        try store.close()
    }
}
