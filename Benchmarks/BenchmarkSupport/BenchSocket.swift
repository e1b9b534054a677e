import Foundation
import HummingbirdWSClient
import Logging

/// A bare WebSocket client: every text message goes to `onText` as it arrives (on the client's
/// event loop, so timestamps taken there include its own scheduling delay: pessimistic). Used to
/// seed servers, drive load and measure the `h` heartbeat baselines.
public final class BenchSocket: Sendable {
    private let outgoing: AsyncStream<String>.Continuation
    private let task: Task<Void, Never>

    private init(outgoing: AsyncStream<String>.Continuation, task: Task<Void, Never>) {
        self.outgoing = outgoing
        self.task = task
    }

    public static func connect(port: Int, onText: @escaping @Sendable (String) -> Void) async throws -> BenchSocket {
        let (stream, outgoing) = AsyncStream<String>.makeStream()
        let (connected, connectedContinuation) = AsyncStream<Result<Void, BenchFailure>>.makeStream()
        var logger = Logger(label: "bench-ws")
        logger.logLevel = .error
        let task = Task {
            do {
                _ = try await WebSocketClient.connect(
                    url: "ws://127.0.0.1:\(port)/sock/1/\(benchAppID)/websocket",
                    configuration: .init(maxFrameSize: 1 << 24), logger: logger
                ) { inbound, outbound, _ in
                    connectedContinuation.yield(.success(()))
                    try await withThrowingTaskGroup(of: Void.self) { group in
                        group.addTask {
                            for try await message in inbound.messages(maxSize: 1 << 24) {
                                if case .text(let text) = message { onText(text) }
                            }
                        }
                        group.addTask {
                            for await text in stream { try await outbound.write(.text(text)) }
                            try await outbound.close(.normalClosure, reason: nil)
                        }
                        try await group.waitForAll()
                    }
                }
            } catch {
                connectedContinuation.yield(.failure(BenchFailure("WebSocket: \(error)")))
            }
            connectedContinuation.finish()
        }
        for await result in connected {
            try result.get()
            return BenchSocket(outgoing: outgoing, task: task)
        }
        throw BenchFailure("WebSocket connection ended before it opened")
    }

    public func send(_ text: String) { outgoing.yield(text) }

    /// Closes the connection and waits until it is gone.
    public func close() async {
        outgoing.finish()
        await task.value
    }
}

/// Lets one task wait until a count reaches a target (ticked from any thread).
public final class Countdown: @unchecked Sendable {
    private let lock = NSLock()
    private var remaining: Int
    private var waiter: CheckedContinuation<Void, Never>?

    public init(_ count: Int) { remaining = count }

    public func tick(_ count: Int = 1) {
        let done: CheckedContinuation<Void, Never>? = lock.withLock {
            remaining -= count
            guard remaining <= 0, let waiter else { return nil }
            self.waiter = nil
            return waiter
        }
        done?.resume()
    }

    /// Waits for zero; throws after `limit` (a hang guard, e.g. when the server drops frames).
    public func wait(limit: Duration = .seconds(120)) async throws {
        let watchdog = Task {
            try await Task.sleep(for: limit)
            self.tick(Int.max / 2)
        }
        defer { watchdog.cancel() }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let immediate: Bool = lock.withLock {
                if remaining <= 0 { return true }
                waiter = continuation
                return false
            }
            if immediate { continuation.resume() }
        }
        if lock.withLock({ remaining }) < -(Int.max / 4) { throw BenchFailure("timed out after \(limit)") }
    }
}
