import NIOConcurrencyHelpers

/// The frames waiting to be written to one connection. Enqueueing never waits: a broadcast must
/// not block on a client that stops reading. When more than `limit` bytes are waiting, the
/// outbox gives up, calls `onOverflow` (which closes the connection) and drops everything.
final class Outbox: Sendable {
    private struct State {
        var frames: [String] = []
        var head = 0
        var bytes = 0
        var waiter: CheckedContinuation<String?, Never>?
        /// No more frames are accepted; the writer drains what is queued, then stops.
        var finished = false
        /// The connection overflowed or closed: queued frames are dropped.
        var abandoned = false
    }

    private let state = NIOLockedValueBox(State())
    private let limit: Int
    private let onOverflow: @Sendable () -> Void

    init(limit: Int, onOverflow: @escaping @Sendable () -> Void) {
        self.limit = limit
        self.onOverflow = onOverflow
    }

    /// Queues a frame; false when the outbox is closed or just overflowed.
    @discardableResult
    func enqueue(_ frame: String) -> Bool {
        enum Action { case rejected, queued, resume(CheckedContinuation<String?, Never>), overflowed }
        let action: Action = state.withLockedValue { state in
            guard !state.finished, !state.abandoned else { return .rejected }
            if let waiter = state.waiter {
                state.waiter = nil
                return .resume(waiter)
            }
            let size = frame.utf8.count
            if state.bytes + size > limit {
                state.abandoned = true
                state.frames = []
                state.head = 0
                state.bytes = 0
                return .overflowed
            }
            state.frames.append(frame)
            state.bytes += size
            return .queued
        }
        switch action {
        case .rejected:
            return false
        case .queued:
            return true
        case .resume(let waiter):
            waiter.resume(returning: frame)
            return true
        case .overflowed:
            onOverflow()
            return false
        }
    }

    /// The next frame to write; nil once finished and drained, or abandoned.
    func next() async -> String? {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<String?, Never>) in
                let immediate: String?? = state.withLockedValue { state in
                    if state.abandoned { return .some(nil) }
                    if state.head < state.frames.count {
                        let frame = state.frames[state.head]
                        state.head += 1
                        state.bytes -= frame.utf8.count
                        if state.head == state.frames.count {
                            state.frames.removeAll(keepingCapacity: true)
                            state.head = 0
                        }
                        return .some(frame)
                    }
                    if state.finished { return .some(nil) }
                    state.waiter = continuation
                    return .none
                }
                if let immediate { continuation.resume(returning: immediate) }
            }
        } onCancel: {
            abandon()
        }
    }

    /// Accepts no more frames; those queued are still handed out by `next()`.
    func finish() {
        let waiter = state.withLockedValue { state -> CheckedContinuation<String?, Never>? in
            state.finished = true
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume(returning: nil)
    }

    /// Drops everything queued and accepts nothing more (the connection is gone).
    func abandon() {
        let waiter = state.withLockedValue { state -> CheckedContinuation<String?, Never>? in
            state.abandoned = true
            state.frames = []
            state.head = 0
            state.bytes = 0
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume(returning: nil)
    }
}
