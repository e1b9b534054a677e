import Hummingbird
import HummingbirdWebSocket
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOWebSocket

/// Runs one WebSocket connection of `/sock/1/{app_id}/websocket`: a reader loop feeding the
/// session, and a writer task draining the connection's outbox.
struct StreamingEndpoint: Sendable {
    let configuration: ServerConfiguration
    let store: any ServerStorage
    let hub: SubscriptionHub
    let logger: Logger

    /// How long queued frames may take to reach the client once the connection is ending.
    static let drainTimeout: Duration = .seconds(5)
    /// The largest `c` message that merging queued broadcasts makes (a single larger change is
    /// sent as it is); well under what clients accept for one message.
    static let maxMergedFrameBytes = 64 * 1024
    /// WebSocket close reasons must fit a 125-byte control frame with the 2-byte code.
    static let maxCloseReasonBytes = 120
    /// The close reason of a connection ended because the database does not answer.
    static let unavailableReason = "database unavailable; reconnect later"

    func run(
        appID: String, inbound: WebSocketInboundStream, outbound: WebSocketOutboundWriter,
        context: WebSocketRouterContext<ServerRequestContext>
    ) async throws {
        let channel = context.requestContext.channel
        var connectionLogger = logger
        connectionLogger[metadataKey: "peer"] = "\(channel.remoteAddress?.description ?? "?")"
        let logger = connectionLogger
        let outbox = Outbox(limit: configuration.maxOutboundBufferBytes, meter: OutboxMeter(statistics: configuration.statistics, kind: .simperium)) {
            logger.warning("closing a connection whose client does not read (outbound buffer full)")
            channel.close(promise: nil)
        }
        let closingUnavailable = NIOLockedValueBox(false)
        let session = StreamingSession(
            configuration: configuration, store: store, hub: hub, outbox: outbox, appID: appID, logger: logger
        ) {
            // A change the database could not take: the connection cannot commit anything now,
            // so it ends (1011); the client reconnects with backoff and resends.
            guard closingUnavailable.withLockedValue({ closing in defer { closing = true }; return !closing }) else { return }
            logger.warning("closing a connection: database unavailable")
            outbox.abandon()
            Task { try? await outbound.close(.unexpectedServerError, reason: Self.unavailableReason) }
        }
        configuration.statistics.webSocketOpened(.simperium)
        defer { configuration.statistics.webSocketClosed(.simperium) }
        let initialization = NIOLockedValueBox(WebSocketWatchdog.InitState.waiting)
        let watchdog = try await WebSocketWatchdog.watch(channel, initialization: initialization, configuration: configuration, logger: logger)
        defer {
            watchdog.cancel()
            session.close()
            outbox.abandon()
        }
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                while let frames = await outbox.nextMerged(maxMergedBytes: Self.maxMergedFrameBytes) {
                    for frame in frames { try await outbound.writeTextMessage(frame) }
                }
            }
            var closeReason: String?
            var closeCode = WebSocketErrorCode.policyViolation
            for try await message in inbound.messages(maxSize: configuration.maxFrameSize) {
                guard case .text(let text) = message else {
                    closeReason = "binary messages are not part of the protocol"
                    break
                }
                let isInit = !session.isInitialized && text.prefix(24).contains(":init:")
                if isInit { initialization.withLockedValue { $0 = .handling } }
                switch await session.handle(text) {
                case .keepOpen: break
                case .close(let reason): closeReason = reason
                case .unavailable(let reason): (closeReason, closeCode) = (reason, .unexpectedServerError)
                }
                if closeReason != nil { break }
                if isInit {
                    initialization.withLockedValue { $0 = session.isInitialized ? .done : .waiting }
                    if session.isInitialized { ConnectionActivity.loggedIn(channel) }
                }
            }
            // Answer the changes already received, then no more broadcasts for this
            // connection; let what is queued reach the client.
            await session.finishChanges()
            session.close()
            outbox.finish()
            let watchdog = Task {
                try await Task.sleep(for: Self.drainTimeout)
                outbox.abandon()
                channel.close(promise: nil)
            }
            defer { watchdog.cancel() }
            try await group.next()
            if let closeReason {
                logger.info("closing connection", metadata: ["reason": "\(closeReason)"])
                try await outbound.close(closeCode, reason: Self.truncated(closeReason))
            }
        }
    }

    static func truncated(_ reason: String) -> String {
        var result = ""
        var bytes = 0
        for character in reason {
            let size = character.utf8.count
            if bytes + size > maxCloseReasonBytes { break }
            result.append(character)
            bytes += size
        }
        return result
    }
}
