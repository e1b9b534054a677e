import Foundation
import Synchronization

/// A value published to any number of AsyncStream subscribers (new ones get the latest value).
public final class Broadcaster<Value: Sendable>: Sendable {
    private struct State {
        var latest: Value?
        var continuations: [UUID: AsyncStream<Value>.Continuation] = [:]
    }
    private let state = Mutex(State())
    /// Whether a new subscriber first gets the latest value (states) or only later ones (events).
    private let replaysLatest: Bool

    public init(initial: Value? = nil, replaysLatest: Bool = true) {
        self.replaysLatest = replaysLatest
        state.withLock { $0.latest = initial }
    }

    public func publish(_ value: Value) {
        let continuations = state.withLock { state -> [AsyncStream<Value>.Continuation] in
            state.latest = value
            return Array(state.continuations.values)
        }
        for continuation in continuations { continuation.yield(value) }
    }

    public var latest: Value? { state.withLock { $0.latest } }

    public func stream() -> AsyncStream<Value> {
        let (stream, continuation) = AsyncStream<Value>.makeStream(bufferingPolicy: .bufferingNewest(10_000))
        let id = UUID()
        let latest = state.withLock { state -> Value? in
            state.continuations[id] = continuation
            return state.latest
        }
        if replaysLatest, let latest { continuation.yield(latest) }
        continuation.onTermination = { [weak self] _ in
            _ = self?.state.withLock { $0.continuations.removeValue(forKey: id) }
        }
        return stream
    }

    public func finish() {
        let continuations = state.withLock { state -> [AsyncStream<Value>.Continuation] in
            defer { state.continuations.removeAll() }
            return Array(state.continuations.values)
        }
        for continuation in continuations { continuation.finish() }
    }
}
