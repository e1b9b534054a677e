/// Hands what a connection's reader produced to the client one at a time, so the reader works
/// on the next message (parsing it: a first sync's index page is ~600 KB of JSON) while the
/// client handles the one before, and never runs more than one message ahead: the WebSocket's
/// flow control still holds the server back when the client is slow.
///
/// One reader (`put`, then `finish` once) and one taker (`take` until it returns nil).
actor InboundHandoff<Element: Sendable> {
    private var slot: Element?
    private var finished = false
    private var failure: (any Error)?
    private var taker: CheckedContinuation<Element?, any Error>?
    private var putter: CheckedContinuation<Void, Never>?

    /// Waits while the message before is still waiting to be taken.
    func put(_ element: Element) async {
        while slot != nil {
            await withCheckedContinuation { putter = $0 }
        }
        if let taker {
            self.taker = nil
            taker.resume(returning: element)
        } else {
            slot = element
        }
    }

    /// The reader is done: `take` returns what is left, then nil, or throws `error`.
    func finish(throwing error: (any Error)? = nil) {
        finished = true
        failure = error
        guard let taker else { return }
        self.taker = nil
        if let error { taker.resume(throwing: error) } else { taker.resume(returning: nil) }
    }

    /// The next message in the order put; nil once the reader finished and all were taken.
    func take() async throws -> Element? {
        if let element = slot {
            slot = nil
            putter?.resume()
            putter = nil
            return element
        }
        if let failure { throw failure }
        if finished { return nil }
        return try await withCheckedThrowingContinuation { taker = $0 }
    }
}
