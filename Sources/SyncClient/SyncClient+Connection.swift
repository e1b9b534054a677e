import Foundation
import HummingbirdWSClient
import Logging
import Synchronization
import SyncEngine
import SyncProtocol
import SyncStore

/// Where outgoing frames go; the real one wraps HummingbirdWSClient's writer.
protocol WebSocketWriting: Sendable {
    func write(_ text: String) async throws
    func close() async
}

struct HummingbirdWriter: WebSocketWriting {
    let outbound: WebSocketOutboundWriter

    func write(_ text: String) async throws {
        try await outbound.write(.text(text))
    }

    func close() async {
        try? await outbound.close(.normalClosure, reason: nil)
    }
}

extension SyncClient {
    /// Connect, serve the connection until it ends, wait (exponential backoff + jitter), repeat.
    /// With several servers, a connection that fails or ends is followed at once by one to the
    /// next server; the wait comes after a round in which every server failed.
    func connectionLoop() async {
        var backoff = Backoff(initial: configuration.initialBackoff, maximum: configuration.maximumBackoff)
        var generator = SystemRandomNumberGenerator()
        var attempt = 0
        var offlineSince = Date()
        let servers = configuration.servers
        var serverIndex = 0
        /// Servers that failed since the last wait or the last authorized connection.
        var failedInRound = 0
        while running && !Task.isCancelled {
            attempt += 1
            let server = ServerInUse(url: servers[serverIndex], position: serverIndex + 1, count: servers.count)
            serverBroadcaster.publish(server)
            stateBroadcaster.publish(.connecting(attempt: attempt))
            var reason = "connection closed"
            var wasAuthorized = false
            let attemptStarted = ContinuousClock.now
            do {
                let opening = OpeningAttempt()
                let url = configuration.socketURL(of: server.url)
                let maxFrameSize = configuration.maxMessageBytes
                let logger = logger
                let attemptTask = Task {
                    try await WebSocketClient.connect(
                        url: url,
                        // A short close timeout: closing a dead connection must not delay the reconnect.
                        configuration: WebSocketClientConfiguration(maxFrameSize: maxFrameSize, closeTimeout: .seconds(2)),
                        logger: logger
                    ) { inbound, outbound, _ in
                        // Opened after the attempt was given up: a later attempt has taken its place.
                        guard opening.markOpened() else {
                            try? await outbound.close(.goingAway, reason: nil)
                            return
                        }
                        try await self.serve(inbound: inbound, writer: HummingbirdWriter(outbound: outbound))
                    }
                }
                let closing = try await opening.wait(for: attemptTask, openingWithin: configuration.openingTimeout)
                // The server's words on why, when it closed the connection (a message too large).
                if let closing {
                    reason = "closed by the server (\(closing.closeCode)\(closing.reason.map { ": \($0)" } ?? ""))"
                }
            } catch {
                reason = String(describing: error)
                logger.debug("connection ended: \(reason)")
            }
            if let storeFailure = connection?.storeFailure { reason = storeFailure }
            wasAuthorized = connectionEnded()
            if wasAuthorized {
                if ContinuousClock.now - attemptStarted >= configuration.stableConnection { backoff.reset() }
                attempt = 0
                offlineSince = Date()
                failedInRound = 0
            }
            failedInRound += 1
            guard running && !Task.isCancelled else { break }
            if servers.count > 1 {
                serverIndex = (serverIndex + 1) % servers.count
                let next = ServerInUse(url: servers[serverIndex], position: serverIndex + 1, count: servers.count)
                let roundFailed = failedInRound >= servers.count
                logger.notice("""
                    server \(server.description) \(wasAuthorized ? "lost" : "unreachable"): \(reason); \
                    \(roundFailed ? "every server failed, trying \(next.description) after a pause" : "moving to \(next.description)")
                    """)
                if !roundFailed { continue }
            }
            failedInRound = 0
            let delay = backoff.nextDelay(using: &generator)
            let seconds = Double(delay.components.seconds) + Double(delay.components.attoseconds) / 1e18
            stateBroadcaster.publish(.offline(since: offlineSince, retryAt: Date().addingTimeInterval(seconds), reason: reason))
            await sleepUnlessWoken(delay)
        }
    }

    /// Serves one open WebSocket: authorize every channel, then read messages in order while a
    /// side task keeps the heartbeat (and closes a dead connection).
    func serve(inbound: WebSocketInboundStream, writer: some WebSocketWriting) async throws {
        let id = await opened(writer: writer)
        let maxBytes = configuration.maxMessageBytes
        let handoff = InboundHandoff<InboundMessage>()
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                while !Task.isCancelled {
                    try await Task.sleep(for: self.configuration.heartbeatInterval / 4)
                    if await self.heartbeatTick(connectionID: id) == false {
                        await writer.close()
                        return
                    }
                }
            }
            // Messages are read and parsed off the client, one ahead of the one it handles.
            group.addTask {
                do {
                    for try await message in inbound.messages(maxSize: maxBytes) {
                        guard case .text(let text) = message else { continue }
                        await handoff.put(InboundMessage(text, maxBytes: maxBytes))
                    }
                    handoff.finish()
                } catch {
                    handoff.finish(throwing: error)
                }
            }
            while let message = try await handoff.take() {
                await receive(message, connectionID: id)
            }
            group.cancelAll()
        }
    }

    func opened(writer: some WebSocketWriting) async -> Int {
        connectionCounter += 1
        let id = connectionCounter
        connection = OpenConnection(id: id, writer: writer, heartbeat: Heartbeat(
            interval: configuration.heartbeatInterval, timeout: configuration.heartbeatTimeout, now: .now))
        sentOnConnection.removeAll()
        stateBroadcaster.publish(.connected)
        for channel in machines.indices where !machines[channel].isUnauthorized && !removedChannels.contains(channel) {
            await authorize(channel: channel)
        }
        return id
    }

    /// Sends `init` on a channel with a fresh token (optionally with the first command as `cmd`).
    func authorize(channel: Int) async {
        let token: String
        do {
            token = try await configuration.token()
        } catch {
            logger.error("no token for \(machines[channel].bucket): \(error)")
            return
        }
        let bucket = machines[channel].bucket
        var request = InitRequest(
            clientID: configuration.clientID, api: "1.1", token: token, appID: configuration.appID, name: bucket,
            library: "bucketfs", version: "1")
        if configuration.sendCommandInInit {
            let command = machines[channel].firstCommand(cv: changeVersionToResumeFrom(bucket))
            request.cmd = "\(command.command.rawValue):\(command.renderPayload())"
        }
        let actions = machines[channel].connected(initRequest: request)
        await perform(actions, channel: channel)
    }

    /// Returns whether any channel was authorized on the connection that ended.
    func connectionEnded() -> Bool {
        let authorized = connection?.authorizedAny ?? false
        connection = nil
        sentOnConnection.removeAll()
        // The next connection sends everything owed, through the window again.
        heldBack.removeAll()
        versionFetches.connectionEnded()
        for channel in machines.indices { machines[channel].disconnected() }
        return authorized
    }

    /// False when the connection is dead (heartbeat unanswered).
    func heartbeatTick(connectionID: Int) async -> Bool {
        guard var open = connection, open.id == connectionID else { return false }
        let action = open.heartbeat.tick(now: .now)
        connection = open
        switch action {
        case .none:
            return true
        case .send(let count):
            await write(ClientMessage.heartbeat(count).render())
            return true
        case .connectionDead:
            logger.warning("heartbeat unanswered; reconnecting")
            return false
        }
    }

    func sleepUnlessWoken(_ delay: Duration) async {
        let sleeper = Task { try? await Task.sleep(for: delay); self.wake() }
        await withCheckedContinuation { continuation in
            if !running {
                continuation.resume()
            } else {
                wakeUp = continuation
            }
        }
        sleeper.cancel()
    }

    /// Writes a frame on the open connection; a failed write ends the connection.
    func write(_ text: String) async {
        guard let connection else { return }
        logger.trace("send \(text)")
        if remoteLogLevel >= 2, !text.hasPrefix("log:") { await remoteLog("send \(text.prefix(200))") }
        do {
            try await connection.writer.write(text)
        } catch {
            logger.debug("write failed: \(error)")
            await connection.writer.close()
        }
    }

    /// `log:{"log": ...}` to the server when it asked for remote logging (spec "Remote logging").
    func remoteLog(_ message: String) async {
        guard remoteLogLevel > 0, let connection else { return }
        let text = ClientMessage.log(.object(["log": .string(message)])).render()
        try? await connection.writer.write(text)
    }
}

extension ChannelClientMessage {
    /// The frame text on a channel.
    func frameText(channel: Int) -> String { ClientMessage.channel(channel, self).render() }
}

/// One connection attempt's opening, raced against a deadline. The attempt's task cannot be
/// cancelled while it waits for the WebSocket upgrade (an event loop future), so a late one is
/// left behind: if it ever opens, it finds itself given up and closes at once.
final class OpeningAttempt: Sendable {
    private enum State {
        case opening
        case opened
        case givenUp
    }

    struct TimedOut: Error, CustomStringConvertible {
        let timeout: Duration
        var description: String { "the connection did not open within \(timeout)" }
    }

    private let state = Mutex(State.opening)
    private let waiter = Waiter()

    /// The connection opened: false when the attempt was given up already.
    func markOpened() -> Bool {
        state.withLock { state in
            guard case .opening = state else { return false }
            state = .opened
            return true
        }
    }

    /// Gives the attempt up unless it opened: whether it was given up now.
    private func giveUp() -> Bool {
        state.withLock { state in
            guard case .opening = state else { return false }
            state = .givenUp
            return true
        }
    }

    /// The attempt's result, or `TimedOut` when it has not opened within `timeout`. Cancelled
    /// (the engine stops), the attempt is cancelled too: an open connection is then waited for
    /// while it closes, as before; one still opening is given up at once.
    func wait(for attempt: Task<WebSocketCloseFrame?, any Error>, openingWithin timeout: Duration) async throws -> WebSocketCloseFrame? {
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                waiter.set(continuation)
                Task { self.waiter.finish(await attempt.result) }
                Task {
                    try? await Task.sleep(for: timeout)
                    if self.giveUp() { self.waiter.finish(.failure(TimedOut(timeout: timeout))) }
                }
            }
        } onCancel: {
            attempt.cancel()
            if giveUp() { waiter.finish(.failure(CancellationError())) }
        }
    }

    /// Resumes the wait once, with whichever result comes first (one may come before the wait
    /// has its continuation).
    private final class Waiter: Sendable {
        private struct State {
            var continuation: CheckedContinuation<WebSocketCloseFrame?, any Error>?
            var early: Result<WebSocketCloseFrame?, any Error>?
            var done = false
        }

        private let state = Mutex(State())

        func set(_ continuation: CheckedContinuation<WebSocketCloseFrame?, any Error>) {
            let early = state.withLock { state -> Result<WebSocketCloseFrame?, any Error>? in
                guard let early = state.early else {
                    state.continuation = continuation
                    return nil
                }
                state.early = nil
                return early
            }
            if let early { continuation.resume(with: early) }
        }

        func finish(_ result: Result<WebSocketCloseFrame?, any Error>) {
            let continuation = state.withLock { state -> CheckedContinuation<WebSocketCloseFrame?, any Error>? in
                guard !state.done else { return nil }
                state.done = true
                guard let continuation = state.continuation else {
                    state.early = result
                    return nil
                }
                state.continuation = nil
                return continuation
            }
            continuation?.resume(with: result)
        }
    }
}
