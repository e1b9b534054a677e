import Foundation
import Synchronization

/// What the connection is doing, for `bucketfs status` and the file system.
public enum ConnectionState: Sendable, Hashable {
    /// Not started, or stopped.
    case stopped
    /// Opening the WebSocket (attempt counts from 1 after the last success).
    case connecting(attempt: Int)
    /// The WebSocket is open.
    case connected
    /// No connection since `since`; the next attempt is at `retryAt`.
    case offline(since: Date, retryAt: Date?, reason: String)
}

/// The server the client connects to (or last tried), of the configured ones.
public struct ServerInUse: Sendable, Hashable, CustomStringConvertible {
    /// Its base URL, as configured.
    public let url: String
    /// Its place in the configured order, from 1.
    public let position: Int
    /// How many servers are configured.
    public let count: Int

    public init(url: String, position: Int, count: Int) {
        self.url = url
        self.position = position
        self.count = count
    }

    /// `ws://b:4000 (2 of 2)`; just the URL when it is the only one.
    public var description: String { count > 1 ? "\(url) (\(position) of \(count))" : url }
}

/// First-sync progress of one bucket: entities stored / entities the index announced so far.
public struct SyncProgress: Sendable, Hashable {
    public let bucket: String
    public let entitiesDone: Int
    public let entitiesKnown: Int
    /// Bytes of index pages and entities received so far.
    public let bytesReceived: Int
    /// True once the whole index is loaded and the bucket is in sync.
    public let isReady: Bool
}

/// A value published to any number of AsyncStream subscribers (new ones get the latest value).
final class Broadcaster<Value: Sendable>: Sendable {
    private struct State {
        var latest: Value?
        var continuations: [UUID: AsyncStream<Value>.Continuation] = [:]
    }
    private let state = Mutex(State())
    /// Whether a new subscriber first gets the latest value (states) or only later ones (events).
    private let replaysLatest: Bool

    init(initial: Value? = nil, replaysLatest: Bool = true) {
        self.replaysLatest = replaysLatest
        state.withLock { $0.latest = initial }
    }

    func publish(_ value: Value) {
        let continuations = state.withLock { state -> [AsyncStream<Value>.Continuation] in
            state.latest = value
            return Array(state.continuations.values)
        }
        for continuation in continuations { continuation.yield(value) }
    }

    var latest: Value? { state.withLock { $0.latest } }

    func stream() -> AsyncStream<Value> {
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

    func finish() {
        let continuations = state.withLock { state -> [AsyncStream<Value>.Continuation] in
            defer { state.continuations.removeAll() }
            return Array(state.continuations.values)
        }
        for continuation in continuations { continuation.finish() }
    }
}
