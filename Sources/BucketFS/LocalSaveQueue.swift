import Synchronization
import SyncStore

/// Changes made through the mount on their way to the sync engine. The file system hands them
/// over without waiting for the engine, and whatever piled up by the time the engine is ready
/// goes out as one batch: a burst of saves costs one store update, one frame and one server
/// commit, not one of each per save.
///
/// A save after a quiet spell goes out at once. Within the window of the last batch (at first
/// `coalescingWindow`; a burst: a checkout, a script, an rsync), the next batch waits for the
/// window to end and takes everything that came meanwhile, as Nagle's algorithm does for small
/// TCP writes.
///
/// A batch has a cost of its own, whatever it holds: the store's fsync before it goes on the
/// wire, a frame, a server commit. While a burst goes on in batches smaller than `largeBatch`
/// (editors' saves, each fsynced and renamed, come a few hundred a second), each window is
/// twice the one before, up to `longestWindow`, so that cost is spread over more saves. A batch
/// of `largeBatch` or more carries it well enough, and the window after it is the shortest
/// again: a fast burst (a checkout) goes in moderate batches rather than in ever larger ones.
/// The first save after a quiet spell goes at once. The windows bound the delay a burst adds
/// to each save.
///
/// The window is measured on `WindowClock`: the mount uses the continuous clock, and tests a
/// clock they move by hand, so what they check does not depend on how busy the machine is.
public final class LocalSaveQueue<WindowClock: Clock>: Sendable where WindowClock.Duration == Duration {
    public let coalescingWindow: Duration
    public let longestWindow: Duration
    public let largeBatch: Int
    private let clock: WindowClock
    private let pending = Mutex<[OutgoingChange]>([])
    private let signals: AsyncStream<Void>
    private let signal: AsyncStream<Void>.Continuation

    public init(
        coalescingWindow: Duration = .milliseconds(5), longestWindow: Duration = .milliseconds(25), largeBatch: Int = 32,
        clock: WindowClock
    ) {
        self.coalescingWindow = coalescingWindow
        self.longestWindow = max(longestWindow, coalescingWindow)
        self.largeBatch = largeBatch
        self.clock = clock
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
        var lastBatch: WindowClock.Instant?
        var window = coalescingWindow
        for await _ in signals {
            var held = false
            if let lastBatch, clock.now < lastBatch.advanced(by: window) {
                // Cancelled (unmount): what is pending goes now; the store keeps it regardless.
                try? await clock.sleep(until: lastBatch.advanced(by: window), tolerance: nil)
                held = true
            }
            let batch = pending.withLock { pending in
                defer { pending.removeAll() }
                return pending
            }
            guard !batch.isEmpty else { continue }
            window = held && batch.count < largeBatch ? min(window * 2, longestWindow) : coalescingWindow
            lastBatch = clock.now
            await body(batch)
        }
    }
}

extension LocalSaveQueue where WindowClock == ContinuousClock {
    public convenience init(
        coalescingWindow: Duration = .milliseconds(5), longestWindow: Duration = .milliseconds(25), largeBatch: Int = 32
    ) {
        self.init(coalescingWindow: coalescingWindow, longestWindow: longestWindow, largeBatch: largeBatch, clock: ContinuousClock())
    }
}
