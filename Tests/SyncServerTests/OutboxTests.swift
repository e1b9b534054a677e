import NIOConcurrencyHelpers
@testable import SyncServer
import Testing

/// A connection's outbox merges the broadcasts queued behind each other into one `c` message.
extension OutboxTests {
    @Test func consecutiveChangeFramesOfOneChannelMerge() {
        let frames = [
            "0:c:[{\"id\":\"a\"}]", "0:c:[{\"id\":\"b\"}]", "12:c:[{\"id\":\"c\"}]", "0:c:[{\"id\":\"d\"}]",
            "h:3", "0:c:[{\"id\":\"e\"}]", "0:c:[{\"id\":\"f\"},{\"id\":\"g\"}]", "0:cv:?", "0:c:[]", "0:c:[{\"id\":\"h\"}]",
        ]
        #expect(Outbox.merged(frames, maxMergedBytes: 1 << 16) == [
            "0:c:[{\"id\":\"a\"},{\"id\":\"b\"}]", "12:c:[{\"id\":\"c\"}]", "0:c:[{\"id\":\"d\"}]",
            "h:3", "0:c:[{\"id\":\"e\"},{\"id\":\"f\"},{\"id\":\"g\"}]", "0:cv:?", "0:c:[]", "0:c:[{\"id\":\"h\"}]",
        ])
    }

    @Test func mergingStopsAtTheSizeLimitAndKeepsOrder() {
        let frames = (0..<10).map { "3:c:[{\"id\":\"k\($0)\"}]" }
        let merged = Outbox.merged(frames, maxMergedBytes: 40)
        #expect(merged.allSatisfy { $0.utf8.count <= 40 })
        #expect(merged.count > 1 && merged.count < frames.count)
        // Every change once, in the order queued.
        let keys = merged.joined().split(separator: "\"").filter { $0.hasPrefix("k") }.map(String.init)
        #expect(keys == (0..<10).map { "k\($0)" })
    }

    /// `/metrics` sees the bytes waiting for a connection (`bucketfs_outbound_queued_bytes`),
    /// counted until the writer has written them, dropped when the connection goes, and how long
    /// each frame waited (`bucketfs_outbound_wait_seconds`).
    @Test func theOutboxReportsItsBytesAndWaits() async {
        let statistics = ServerStatistics()
        func queued() -> Double? { sample(statistics.prometheusText(), #"bucketfs_outbound_queued_bytes{protocol="telepat"}"#) }
        func waited() -> Double? { sample(statistics.prometheusText(), #"bucketfs_outbound_wait_seconds_count{protocol="telepat"}"#) }
        #expect(queued() == 0 && waited() == 0)
        let outbox = Outbox(limit: 1 << 20, meter: OutboxMeter(statistics: statistics, kind: .telepat)) {}
        for frame in ["12345", "123", "1234567"] { outbox.enqueue(frame) }
        #expect(queued() == 15)
        #expect(await outbox.next() == "12345")
        // Handed to the writer, not yet written: still counted.
        #expect(queued() == 15 && waited() == 1)
        #expect(await outbox.next() == "123")
        #expect(queued() == 10 && waited() == 2)
        outbox.abandon()
        #expect(queued() == 0)
        // Another connection's outbox, gone with a frame in the writer's hands.
        do {
            let other = Outbox(limit: 1 << 20, meter: OutboxMeter(statistics: statistics, kind: .telepat)) {}
            other.enqueue("abcd")
            #expect(await other.next() == "abcd")
            #expect(queued() == 4)
        }
        #expect(queued() == 0 && waited() == 3)
        #expect(sample(statistics.prometheusText(), #"bucketfs_outbound_queued_bytes{protocol="simperium"}"#) == 0)
    }

    @Test func nextMergedTakesEverythingQueuedAndEndsAfterFinish() async {
        let outbox = Outbox(limit: 1 << 20) {}
        for key in ["a", "b", "c"] { outbox.enqueue("0:c:[{\"id\":\"\(key)\"}]") }
        outbox.enqueue("0:i:{\"index\":[]}")
        #expect(await outbox.nextMerged(maxMergedBytes: 1 << 16) == ["0:c:[{\"id\":\"a\"},{\"id\":\"b\"},{\"id\":\"c\"}]", "0:i:{\"index\":[]}"])
        outbox.enqueue("0:c:[{\"id\":\"d\"}]")
        outbox.finish()
        #expect(await outbox.nextMerged(maxMergedBytes: 1 << 16) == ["0:c:[{\"id\":\"d\"}]"])
        #expect(await outbox.nextMerged(maxMergedBytes: 1 << 16) == nil)
    }
}

/// Issue 20: the outbox's limit holds while the writer waits and while it writes.
extension OutboxTests {
    @Test func aFrameHandedToAWaitingWriterCountsAgainstTheLimit() async {
        let overflowed = NIOLockedValueBox(false)
        let outbox = Outbox(limit: 100) { overflowed.withLockedValue { $0 = true } }
        let writer = Task { await outbox.next() }
        // Let the writer reach its wait (bounded: a hang guard, not a timing assumption).
        for _ in 0..<200 where !outbox.hasWaitingWriter { await Task.yield(); try? await Task.sleep(for: .milliseconds(1)) }
        #expect(outbox.enqueue(String(repeating: "x", count: 200)) == false)
        #expect(overflowed.withLockedValue { $0 })
        #expect(await writer.value == nil)
    }

    @Test func framesBeingWrittenCountUntilTheWriterAsksForMore() async {
        let outbox = Outbox(limit: 100) {}
        #expect(outbox.enqueue(String(repeating: "a", count: 60)))
        #expect(await outbox.nextMerged(maxMergedBytes: 1 << 16)?.count == 1)
        // 60 bytes are still being written: 60 more do not fit.
        #expect(outbox.enqueue(String(repeating: "b", count: 60)) == false)
    }
}
