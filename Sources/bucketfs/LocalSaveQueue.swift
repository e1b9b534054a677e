import Synchronization
import SyncStore

/// Changes made through the mount on their way to the sync engine. The file system hands them
/// over without waiting (it answers the kernel first), and whatever piled up by the time the
/// engine is ready goes out as one batch: a burst of saves costs one store update and one
/// hand-off, not one of each per save.
final class LocalSaveQueue: Sendable {
    private let pending = Mutex<[OutgoingChange]>([])
    private let signals: AsyncStream<Void>
    private let signal: AsyncStream<Void>.Continuation

    init() {
        // One buffered signal is enough: the consumer takes everything pending when it wakes.
        (signals, signal) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
    }

    func add(_ changes: [OutgoingChange]) {
        guard !changes.isEmpty else { return }
        let wasEmpty = pending.withLock { pending in
            defer { pending += changes }
            return pending.isEmpty
        }
        if wasEmpty { signal.yield() }
    }

    /// Calls `body` with each batch, in the order the changes were added, until the task is
    /// cancelled.
    func forEachBatch(_ body: ([OutgoingChange]) async -> Void) async {
        for await _ in signals {
            let batch = pending.withLock { pending in
                defer { pending.removeAll() }
                return pending
            }
            if !batch.isEmpty { await body(batch) }
        }
    }
}
