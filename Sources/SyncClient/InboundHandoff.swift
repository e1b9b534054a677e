import Synchronization

/// Hands what a connection's reader produced to the client one at a time, so the reader works
/// on the next message (parsing it: a first sync's index page is ~600 KB of JSON) while the
/// client handles the one before, and never runs more than one message ahead: the WebSocket's
/// flow control still holds the server back when the client is slow.
///
/// One reader (`put`, then `finish` once) and one taker (`take` until it returns nil). A lock,
/// not an actor: neither side suspends unless it has to wait for the other (a save's
/// acknowledgement passes through here, and two actor hops would cost it more than the lock).
final class InboundHandoff<Element: Sendable>: Sendable {
    private struct State {
        var slot: Element?
        var finished = false
        var failure: (any Error)?
        var taker: CheckedContinuation<Element?, any Error>?
        var putter: CheckedContinuation<Void, Never>?
    }

    /// What `take` found.
    private enum Taken {
        case element(Element, wakingPutter: CheckedContinuation<Void, Never>?)
        case end((any Error)?)
        case nothingYet
    }

    private let state = Mutex(State())

    /// Waits while the message before is still waiting to be taken.
    func put(_ element: Element) async {
        while true {
            let delivered = state.withLock { state -> (done: Bool, taker: CheckedContinuation<Element?, any Error>?) in
                guard state.slot == nil else { return (false, nil) }
                if let taker = state.taker {
                    state.taker = nil
                    return (true, taker)
                }
                state.slot = element
                return (true, nil)
            }
            if delivered.done {
                delivered.taker?.resume(returning: element)
                return
            }
            await withCheckedContinuation { putter in
                let free = state.withLock { state in
                    if state.slot == nil { return true }
                    state.putter = putter
                    return false
                }
                if free { putter.resume() }
            }
        }
    }

    /// The reader is done: `take` returns what is left, then nil, or throws `error`.
    func finish(throwing error: (any Error)? = nil) {
        let taker = state.withLock { state in
            state.finished = true
            state.failure = error
            defer { state.taker = nil }
            return state.taker
        }
        guard let taker else { return }
        if let error { taker.resume(throwing: error) } else { taker.resume(returning: nil) }
    }

    /// The next message in the order put; nil once the reader finished and all were taken.
    func take() async throws -> Element? {
        switch state.withLock({ Self.take(from: &$0) }) {
        case .element(let element, let putter):
            putter?.resume()
            return element
        case .end(let failure):
            if let failure { throw failure }
            return nil
        case .nothingYet:
            return try await withCheckedThrowingContinuation { taker in
                let taken = state.withLock { state in
                    let taken = Self.take(from: &state)
                    if case .nothingYet = taken { state.taker = taker }
                    return taken
                }
                switch taken {
                case .element(let element, let putter):
                    putter?.resume()
                    taker.resume(returning: element)
                case .end(let failure?): taker.resume(throwing: failure)
                case .end(nil): taker.resume(returning: nil)
                case .nothingYet: break
                }
            }
        }
    }

    private static func take(from state: inout State) -> Taken {
        if let element = state.slot {
            state.slot = nil
            defer { state.putter = nil }
            return .element(element, wakingPutter: state.putter)
        }
        if state.finished { return .end(state.failure) }
        return .nothingYet
    }
}
