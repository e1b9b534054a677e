import NIOConcurrencyHelpers

/// The changes one connection has submitted whose replies have not been queued yet. A
/// connection keeps reading (and so keeps the group commit fed) while its changes wait for the
/// disk, up to `limit`; then its reader waits, which pushes back on the client through TCP.
final class InFlightChanges: Sendable {
    private struct State {
        var count = 0
        var slotWaiters: [CheckedContinuation<Void, Never>] = []
        var drainWaiters: [CheckedContinuation<Void, Never>] = []
    }

    private let state = NIOLockedValueBox(State())
    private let limit: Int

    init(limit: Int) {
        self.limit = max(1, limit)
    }

    /// Takes a slot, waiting while `limit` changes are in flight.
    func acquire() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let granted: Bool = state.withLockedValue { state in
                guard state.count < limit else {
                    state.slotWaiters.append(continuation)
                    return false
                }
                state.count += 1
                return true
            }
            if granted { continuation.resume() }
        }
    }

    /// Gives a slot back (the change's reply is queued); callable from any thread.
    func release() {
        let (slot, drained): (CheckedContinuation<Void, Never>?, [CheckedContinuation<Void, Never>]) = state.withLockedValue { state in
            if !state.slotWaiters.isEmpty {
                // The slot passes straight to a waiting reader; the count stays.
                return (state.slotWaiters.removeFirst(), [])
            }
            state.count -= 1
            guard state.count == 0 else { return (nil, []) }
            defer { state.drainWaiters = [] }
            return (nil, state.drainWaiters)
        }
        slot?.resume()
        for waiter in drained { waiter.resume() }
    }

    /// Waits until every change taken so far has its reply queued.
    func drained() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let done: Bool = state.withLockedValue { state in
                guard state.count > 0 else { return true }
                state.drainWaiters.append(continuation)
                return false
            }
            if done { continuation.resume() }
        }
    }
}
