import NIOConcurrencyHelpers

/// What an outbox holds: a text frame (the Simperium and Telepat sockets) or a binary one
/// (Apptimist PDUs), counted in bytes against the outbox's limit.
protocol OutboxFrame: Sendable {
    var outboxBytes: Int { get }
}

extension String: OutboxFrame {
    var outboxBytes: Int { utf8.count }
}

extension Array: OutboxFrame where Element == UInt8 {
    var outboxBytes: Int { count }
}

/// The text sockets' outbox.
typealias Outbox = FrameOutbox<String>

/// Where an outbox reports the bytes it holds and how long its frames wait for the socket
/// (`bucketfs_outbound_queued_bytes`, `bucketfs_outbound_wait_seconds`: the fan-out delay of a
/// broadcast change, per connection).
struct OutboxMeter: Sendable {
    let statistics: ServerStatistics
    let kind: ServerStatistics.WebSocketProtocol
}

/// The frames waiting to be written to one connection. Enqueueing never waits: a broadcast must
/// not block on a client that stops reading. When more than `limit` bytes are waiting, the
/// outbox gives up, calls `onOverflow` (which closes the connection) and drops everything.
final class FrameOutbox<Frame: OutboxFrame>: Sendable {
    /// A frame and when it was queued.
    private struct Queued {
        let frame: Frame
        let at: ContinuousClock.Instant
    }

    private struct State {
        var frames: [Queued] = []
        var head = 0
        var bytes = 0
        /// Bytes handed to the writer and not yet written: they count against the limit until
        /// the writer asks for more (issue 20: the limit was bypassed while the writer waited).
        var handedOut = 0
        var waiter: CheckedContinuation<Frame?, Never>?
        /// No more frames are accepted; the writer drains what is queued, then stops.
        var finished = false
        /// The connection overflowed or closed: queued frames are dropped.
        var abandoned = false

        /// Drops every queued frame and accepts no more; returns the waiting writer to resume.
        mutating func abandon() -> CheckedContinuation<Frame?, Never>? {
            abandoned = true
            frames = []
            head = 0
            bytes = 0
            handedOut = 0
            defer { waiter = nil }
            return waiter
        }
    }

    private enum EnqueueAction { case rejected, queued, resume(CheckedContinuation<Frame?, Never>), overflowed(CheckedContinuation<Frame?, Never>?) }

    private let state = NIOLockedValueBox(State())
    private let limit: Int
    private let meter: OutboxMeter?
    private let onOverflow: @Sendable () -> Void

    init(limit: Int, meter: OutboxMeter? = nil, onOverflow: @escaping @Sendable () -> Void) {
        self.limit = limit
        self.meter = meter
        self.onOverflow = onOverflow
    }

    deinit {
        // A connection that ended with frames queued or being written: they leave the gauge.
        let left = state.withLockedValue { $0.bytes + $0.handedOut }
        if let meter, left != 0 { meter.statistics.outboundBytesChanged(meter.kind, by: -left) }
    }

    /// Runs `body` under the lock, then reports how the bytes held changed and how long the
    /// frames it handed out (`waited`, their queue times) were queued.
    private func withState<T>(_ body: (inout State, _ waited: inout [ContinuousClock.Instant]) -> T) -> T {
        var waited: [ContinuousClock.Instant] = []
        let (result, change) = state.withLockedValue { state in
            let before = state.bytes + state.handedOut
            let result = body(&state, &waited)
            return (result, state.bytes + state.handedOut - before)
        }
        if let meter {
            if change != 0 { meter.statistics.outboundBytesChanged(meter.kind, by: change) }
            if !waited.isEmpty {
                let now = ContinuousClock.now
                meter.statistics.outboundFramesWaited(meter.kind, waited.map { now - $0 })
            }
        }
        return result
    }

    /// Whether the writer is waiting for a frame (for tests).
    var hasWaitingWriter: Bool { state.withLockedValue { $0.waiter != nil } }

    /// Queues a frame; false when the outbox is closed or just overflowed.
    @discardableResult
    func enqueue(_ frame: Frame) -> Bool {
        let now = ContinuousClock.now
        let action: EnqueueAction = withState { state, waited in
            guard !state.finished, !state.abandoned else { return .rejected }
            let size = frame.outboxBytes
            if state.bytes + state.handedOut + size > limit {
                return .overflowed(state.abandon())
            }
            if let waiter = state.waiter {
                state.waiter = nil
                state.handedOut = size
                waited.append(now)
                return .resume(waiter)
            }
            state.frames.append(Queued(frame: frame, at: now))
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
        case .overflowed(let waiter):
            waiter?.resume(returning: nil)
            onOverflow()
            return false
        }
    }

    /// The next frame to write; nil once finished and drained, or abandoned.
    func next() async -> Frame? {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Frame?, Never>) in
                let immediate: Frame?? = withState { state, waited in
                    // Asking for more means what was handed out before has been written.
                    state.handedOut = 0
                    if state.abandoned { return .some(nil) }
                    if state.head < state.frames.count {
                        let queued = state.frames[state.head]
                        state.head += 1
                        state.bytes -= queued.frame.outboxBytes
                        state.handedOut = queued.frame.outboxBytes
                        waited.append(queued.at)
                        if state.head == state.frames.count {
                            state.frames.removeAll(keepingCapacity: true)
                            state.head = 0
                        }
                        return .some(queued.frame)
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

    /// Up to `limit` frames already queued, without waiting (none: empty). They count against
    /// the limit, as a frame from `next()` does, until the writer asks again. A long-polling
    /// answer (Telepat's Engine.IO) carries the frame it waited for and these.
    func takeQueued(limit: Int) -> [Frame] {
        withState { state, waited in
            guard !state.abandoned, limit > 0, state.head < state.frames.count else { return [] }
            let end = min(state.frames.count, state.head + limit)
            let taken = state.frames[state.head..<end].map(\.frame)
            waited += state.frames[state.head..<end].map(\.at)
            state.head = end
            let bytes = taken.reduce(0) { $0 + $1.outboxBytes }
            state.bytes -= bytes
            state.handedOut += bytes
            if state.head == state.frames.count {
                state.frames.removeAll(keepingCapacity: true)
                state.head = 0
            }
            return taken
        }
    }

    /// Accepts no more frames; those queued are still handed out by `next()`.
    func finish() {
        let waiter = withState { state, _ -> CheckedContinuation<Frame?, Never>? in
            state.finished = true
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume(returning: nil)
    }

    /// Drops everything queued and accepts nothing more (the connection is gone).
    func abandon() {
        let waiter = withState { state, _ in state.abandon() }
        waiter?.resume(returning: nil)
    }
}

extension FrameOutbox where Frame == String {
    /// The next frame to write, with every frame queued behind it merged in where the protocol
    /// allows: consecutive `c` frames of one channel become one `c` array (up to
    /// `maxMergedBytes`). Under load a connection then gets one message, and one flush, for
    /// many broadcasts instead of one each; nothing waits for a merge. Nil as for `next()`.
    func nextMerged(maxMergedBytes: Int) async -> [String]? {
        guard let first = await next() else { return nil }
        let queued: [String] = withState { state, waited in
            guard !state.abandoned, state.head < state.frames.count else { return [] }
            let rest = state.frames[state.head...].map(\.frame)
            waited += state.frames[state.head...].map(\.at)
            state.frames.removeAll(keepingCapacity: true)
            state.head = 0
            state.handedOut += state.bytes
            state.bytes = 0
            return rest
        }
        return Self.merged([first] + queued, maxMergedBytes: maxMergedBytes)
    }

    /// Merges runs of `<channel>:c:[...]` frames of the same channel (order kept).
    static func merged(_ frames: [String], maxMergedBytes: Int) -> [String] {
        var result: [String] = []
        var run: (prefix: Substring, items: [Substring], bytes: Int)?
        func flush() {
            guard let current = run else { return }
            result.append(String(current.prefix) + "[" + current.items.joined(separator: ",") + "]")
            run = nil
        }
        for frame in frames {
            guard let (prefix, items) = changeArray(frame) else {
                flush()
                result.append(frame)
                continue
            }
            if let current = run, current.prefix == prefix, current.bytes + items.utf8.count + 1 <= maxMergedBytes {
                run?.items.append(items)
                run?.bytes += items.utf8.count + 1
            } else {
                flush()
                run = (prefix, [items], frame.utf8.count)
            }
        }
        flush()
        return result
    }

    /// `("3:c:", items)` for a frame `3:c:[items]`; nil for any other frame.
    private static func changeArray(_ frame: String) -> (prefix: Substring, items: Substring)? {
        let utf8 = frame.utf8
        guard let colon = utf8.firstIndex(of: UInt8(ascii: ":")), colon > utf8.startIndex,
            utf8[utf8.startIndex..<colon].allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) })
        else { return nil }
        let command = utf8.index(after: colon)
        guard utf8[command...].starts(with: "c:[".utf8), utf8.last == UInt8(ascii: "]") else { return nil }
        let open = utf8.index(command, offsetBy: 2)
        let itemsStart = utf8.index(after: open)
        let itemsEnd = utf8.index(before: utf8.endIndex)
        guard itemsStart < itemsEnd else { return nil }
        return (frame[..<open], frame[itemsStart..<itemsEnd])
    }
}
