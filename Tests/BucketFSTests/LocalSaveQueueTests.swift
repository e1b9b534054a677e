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
        let queue = LocalSaveQueue(coalescingWindow: window)
        let (batches, delivered) = AsyncStream<[String]>.makeStream()
        let consumer = Task { await queue.forEachBatch { delivered.yield($0.map(\.key)) } }
        defer { consumer.cancel() }
        var received = batches.makeAsyncIterator()

        queue.add([try change("a")])
        #expect(await received.next() == ["a"])
        // Within the window of the last batch: held, then sent together, in order.
        for key in ["b", "c", "d"] { queue.add([try change(key)]) }
        #expect(await received.next() == ["b", "c", "d"])

        try await Task.sleep(for: window + .milliseconds(200))
        let quiet = try change("e")
        let handedOver = ContinuousClock.now
        queue.add([quiet])
        #expect(await received.next() == ["e"])
        // Not held for a window (the bound is the window itself, not a speed target).
        #expect(ContinuousClock.now - handedOver < window)
        try store.close()
    }
}
