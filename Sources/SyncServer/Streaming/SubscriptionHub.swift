import NIOConcurrencyHelpers
import SyncProtocol

/// Which channels of which connections follow which bucket. A committed change is rendered once
/// and queued on every subscribed channel, the sender's included (that is its acknowledgement).
final class SubscriptionHub: Sendable {
    private struct Subscriber {
        var channel: Int
        var outbox: Outbox
    }

    private struct State {
        var nextID: UInt64 = 1
        var buckets: [Int64: [UInt64: Subscriber]] = [:]
    }

    private let state = NIOLockedValueBox(State())

    /// Subscribes a channel and queues `firstFrame` (the `auth` reply) under the same lock that
    /// broadcasts take, so no change can reach the channel before its `auth`.
    func subscribe(bucketID: Int64, channel: Int, outbox: Outbox, firstFrame: String) -> UInt64 {
        state.withLockedValue { state in
            let id = state.nextID
            state.nextID += 1
            state.buckets[bucketID, default: [:]][id] = Subscriber(channel: channel, outbox: outbox)
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

    /// Queues a committed change on every channel following the bucket. Called on the store's
    /// serial completion queue after the commit, so channels see changes in cv order.
    func publish(bucketID: Int64, change: StoredChange) {
        let payload = Change.renderPayload([.applied(change.applied)])
        state.withLockedValue { state in
            guard let subscribers = state.buckets[bucketID] else { return }
            // Most connections use channel 0: render each channel's frame once.
            var frames: [Int: String] = [:]
            for subscriber in subscribers.values {
                let frame = frames[subscriber.channel] ?? Frame(channel: subscriber.channel, command: .changes, payload: payload).render()
                frames[subscriber.channel] = frame
                subscriber.outbox.enqueue(frame)
            }
        }
    }
}
