import Synchronization
import SyncStore

/// Changes made through the mount on their way to the sync engine. The file system hands them
/// over without waiting for the engine, and whatever piled up by the time the engine is ready
/// goes out as one batch: a burst of saves costs one store update, one frame and one server
/// commit, not one of each per save.
///
/// A save after a quiet spell goes out at once. Within `coalescingWindow` of the last batch
/// (a burst: a checkout, a script, an rsync), the next batch waits for the window to end and
/// takes everything that came meanwhile, as Nagle's algorithm does for small TCP writes. The
/// window bounds the delay a burst adds to each save.
public final class LocalSaveQueue: Sendable {
    public let coalescingWindow: Duration
    private let pending = Mutex<[OutgoingChange]>([])
    private let signals: AsyncStream<Void>
    private let signal: AsyncStream<Void>.Continuation

    public init(coalescingWindow: Duration = .milliseconds(5)) {
        self.coalescingWindow = coalescingWindow
        // One buffered signal is enough: the consumer takes everything pending when it wakes.
        (signals, signal) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
    }

    public func add(_ changes: [OutgoingChange]) {
        guard !changes.isEmpty else { return }
        let wasEmpty = pending.withLock { pending in
            defer { pending += changes }
            return pending.isEmpty
        }
        if wasEmpty { signal.yield() }
    }

    /// Calls `body` with each batch, in the order the changes were added, until the task is
    /// cancelled.
    public func forEachBatch(_ body: ([OutgoingChange]) async -> Void) async {
        var lastBatch: ContinuousClock.Instant?
        for await _ in signals {
            if let lastBatch, ContinuousClock.now < lastBatch + coalescingWindow {
                // Cancelled (unmount): what is pending goes now; the store keeps it regardless.
                try? await Task.sleep(until: lastBatch + coalescingWindow, clock: .continuous)
            }
            let batch = pending.withLock { pending in
                defer { pending.removeAll() }
                return pending
            }
            guard !batch.isEmpty else { continue }
            lastBatch = .now
            await body(batch)
        }
    }
}
