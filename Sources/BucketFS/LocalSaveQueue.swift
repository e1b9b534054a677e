import Synchronization
import SyncStore

/// Changes made through the mount on their way to the sync engine. The file system hands them
/// over without waiting for the engine, and whatever piled up by the time the engine is ready
/// goes out as one batch: a burst of saves costs one store update, one frame and one server
/// commit, not one of each per save.
///
/// A save after a quiet spell goes out at once. Within `coalescingWindow` of the last batch
/// (a burst: a checkout, a script, an rsync), the next batch waits for the window to end and
/// takes everything that came meanwhile, as Nagle's algorithm does for small TCP writes. While
/// the burst goes on, each window is twice the one before, up to `longestWindow`: a long burst
/// then costs the engine a batch (and the store an fsync for sending it) per `longestWindow`
/// rather than per few saves. The first save after a quiet spell starts again at
/// `coalescingWindow`. The windows bound the delay a burst adds to each save.
///
/// The window is measured on `WindowClock`: the mount uses the continuous clock, and tests a
/// clock they move by hand, so what they check does not depend on how busy the machine is.
public final class LocalSaveQueue<WindowClock: Clock>: Sendable where WindowClock.Duration == Duration {
    public let coalescingWindow: Duration
    public let longestWindow: Duration
    private let clock: WindowClock
    private let pending = Mutex<[OutgoingChange]>([])
    private let signals: AsyncStream<Void>
    private let signal: AsyncStream<Void>.Continuation

    public init(coalescingWindow: Duration = .milliseconds(5), longestWindow: Duration = .milliseconds(25), clock: WindowClock) {
        self.coalescingWindow = coalescingWindow
        self.longestWindow = max(longestWindow, coalescingWindow)
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
            if let lastBatch, clock.now < lastBatch.advanced(by: window) {
                // Cancelled (unmount): what is pending goes now; the store keeps it regardless.
                try? await clock.sleep(until: lastBatch.advanced(by: window), tolerance: nil)
                window = min(window * 2, longestWindow)
            } else {
                window = coalescingWindow
            }
            let batch = pending.withLock { pending in
                defer { pending.removeAll() }
                return pending
            }
            guard !batch.isEmpty else { continue }
            lastBatch = clock.now
            await body(batch)
        }
    }
}

extension LocalSaveQueue where WindowClock == ContinuousClock {
    public convenience init(coalescingWindow: Duration = .milliseconds(5), longestWindow: Duration = .milliseconds(25)) {
        self.init(coalescingWindow: coalescingWindow, longestWindow: longestWindow, clock: ContinuousClock())
    }
}
