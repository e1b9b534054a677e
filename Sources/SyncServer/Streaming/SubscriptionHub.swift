import NIOConcurrencyHelpers
import SyncProtocol

/// Which channels of which connections follow which bucket. A committed change is rendered once
/// and queued on every subscribed channel, the sender's included (that is its acknowledgement).
final class SubscriptionHub: Sendable {
    private struct Subscriber {
        var channel: Int
        var outbox: Outbox
        /// Broadcasts held back between the `auth` reply and the channel's first command; nil
        /// once the channel receives broadcasts as they come.
        var held: HeldFrames?
    }

    /// A channel's held broadcasts, in cv order.
    private struct HeldFrames {
        var frames: [String] = []
        var bytes = 0
    }

    private struct State {
        var nextID: UInt64 = 1
        var buckets: [Int64: [UInt64: Subscriber]] = [:]
    }

    private let state = NIOLockedValueBox(State())
    /// Other front ends (Telepat) that follow every committed change, in the same order.
    private let observers = NIOLockedValueBox<[@Sendable (Int64, StoredChange) -> Void]>([])
    /// Bytes of broadcasts one channel may hold; past it they are delivered (the channel is
    /// then as it would be without holding).
    private let maxHeldBytes: Int

    /// The number of the history the store serves, which every cv on the wire carries.
    private let history: UInt64

    init(history: UInt64, maxHeldBytes: Int = 4 << 20) {
        self.history = history
        self.maxHeldBytes = maxHeldBytes
    }

    /// Subscribes a channel and queues `firstFrame` (the `auth` reply) under the same lock that
    /// broadcasts take, so no change can reach the channel before its `auth`.
    ///
    /// With `holdingBroadcasts`, changes committed from now on are held until `release`: a
    /// client answers `auth` with `cv:`, whose catch-up holds those changes already, and a
    /// broadcast reaching it first would put a newer change before older ones (a client that
    /// stores the newer cv and then loses the connection would resume past the older ones).
    func subscribe(bucketID: Int64, channel: Int, outbox: Outbox, firstFrame: String, holdingBroadcasts: Bool = false) -> UInt64 {
        state.withLockedValue { state in
            let id = state.nextID
            state.nextID += 1
            state.buckets[bucketID, default: [:]][id] = Subscriber(
                channel: channel, outbox: outbox, held: holdingBroadcasts ? HeldFrames() : nil
            )
            outbox.enqueue(firstFrame)
            return id
        }
    }

    func unsubscribe(bucketID: Int64, subscriptionID: UInt64) {
        state.withLockedValue { state in
            state.buckets[bucketID]?[subscriptionID] = nil
            if state.buckets[bucketID]?.isEmpty == true { state.buckets[bucketID] = nil }
        }
    }

    /// Ends a channel's hold: its held broadcasts are queued (`deliveringHeld`), or dropped
    /// because a catch-up queued at this instant on the store's completion queue holds them.
    /// Does nothing for a channel no longer holding or no longer subscribed.
    func release(bucketID: Int64, subscriptionID: UInt64, deliveringHeld: Bool) {
        state.withLockedValue { state in
            guard let subscriber = state.buckets[bucketID]?[subscriptionID], let held = subscriber.held else { return }
            state.buckets[bucketID]?[subscriptionID]?.held = nil
            guard deliveringHeld else { return }
            for frame in held.frames { subscriber.outbox.enqueue(frame) }
        }
    }

    /// Hands every change published from now on to `observer`, on the publishing thread (the
    /// store's delivery sequence), after the streaming channels have it queued.
    func observe(_ observer: @escaping @Sendable (_ bucketID: Int64, _ change: StoredChange) -> Void) {
        observers.withLockedValue { $0.append(observer) }
    }

    /// Queues a committed change on every channel following the bucket (or holds it for a
    /// channel holding broadcasts). Called on the store's serial completion queue after the
    /// commit, so channels see changes in cv order.
    func publish(bucketID: Int64, change: StoredChange) {
        defer { for observer in observers.withLockedValue({ $0 }) { observer(bucketID, change) } }
        let payload = Change.renderPayload([.applied(change.applied(history: history))])
        state.withLockedValue { state in
            guard let subscribers = state.buckets[bucketID] else { return }
            // Most connections use channel 0: render each channel's frame once.
            var frames: [Int: String] = [:]
            for (id, subscriber) in subscribers {
                let frame = frames[subscriber.channel] ?? Frame(channel: subscriber.channel, command: .changes, payload: payload).render()
                frames[subscriber.channel] = frame
                guard var held = subscriber.held else {
                    subscriber.outbox.enqueue(frame)
                    continue
                }
                held.frames.append(frame)
                held.bytes += frame.utf8.count
                if held.bytes > maxHeldBytes {
                    for frame in held.frames { subscriber.outbox.enqueue(frame) }
                    state.buckets[bucketID]?[id]?.held = nil
                } else {
                    state.buckets[bucketID]?[id]?.held = held
                }
            }
        }
    }
}
