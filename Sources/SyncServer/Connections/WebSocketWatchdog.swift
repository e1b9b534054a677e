import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOWebSocket

/// The deadlines of one WebSocket connection (issue 20: a peer that stopped reading on a quiet
/// bucket stayed for good, as did never-initialised connections). Runs beside the connection
/// and closes its channel when one passes, logging why:
/// - no successful `init` within `initTimeout` (not counting while one is being handled);
/// - writes blocked (the peer's receive window full) for `stalledWriteTimeout`;
/// - nothing received, not even a pong, for a `pingInterval` after a ping (RFC 6455 §5.5.2).
/// Pings are written straight to the channel: they queue behind nothing and never wait on
/// backpressure, so a peer that does not read cannot hold the watchdog up.
struct WebSocketWatchdog: Sendable {
    let channel: any Channel
    let activity: ConnectionActivity?
    let initialization: NIOLockedValueBox<InitState>

    /// Where a connection stands with its init deadline. The server's own time handling an
    /// init (a slow store) is not charged to the client.
    enum InitState: Sendable {
        case waiting, handling, done
    }
    let initTimeout: Duration
    let pingInterval: Duration
    let stalledWriteTimeout: Duration
    let logger: Logger

    func run() async {
        let tick = max(.milliseconds(10), min(initTimeout, pingInterval, stalledWriteTimeout) / 4)
        let clock = ContinuousClock()
        let start = clock.now
        var lastPing = start
        var pingSentAt: NIODeadline?
        var unwritableSince: ContinuousClock.Instant?
        while !Task.isCancelled, channel.isActive {
            do { try await Task.sleep(for: tick) } catch { return }
            let now = clock.now
            if initialization.withLockedValue({ $0 }) == .waiting, now - start > initTimeout {
                return close("no successful init", after: initTimeout, level: .info)
            }
            if channel.isWritable {
                unwritableSince = nil
            } else if let since = unwritableSince {
                if now - since > stalledWriteTimeout {
                    return close("the client stopped reading (writes blocked)", after: stalledWriteTimeout, level: .warning)
                }
            } else {
                unwritableSince = now
            }
            if now - lastPing >= pingInterval {
                if let sent = pingSentAt, let activity, activity.lastInbound < sent {
                    return close("ping timeout: nothing received since a ping", after: pingInterval, level: .info)
                }
                lastPing = now
                pingSentAt = .now()
                let frame = WebSocketFrame(fin: true, opcode: .ping, data: ByteBuffer(string: "bucketfs"))
                channel.writeAndFlush(frame, promise: nil)
            }
        }
    }

    private func close(_ reason: String, after bound: Duration, level: Logger.Level) {
        logger.log(level: level, "closing a WebSocket connection", metadata: ["reason": "\(reason)", "after": "\(bound)"])
        channel.close(promise: nil)
    }
}

extension WebSocketWatchdog {
    /// Puts a server WebSocket under its own deadlines: unmasked client frames refused, the
    /// HTTP request deadline left behind, and a watchdog started (cancel it when the connection
    /// ends). `initialization` is the protocol's init (Simperium's `init`, Apptimist's LOGIN).
    static func watch(
        _ channel: any Channel, initialization: NIOLockedValueBox<InitState>, configuration: ServerConfiguration, logger: Logger
    ) async throws -> Task<Void, Never> {
        // Frames read before this runs (the client's first, at most) are not checked.
        try await MaskedFramesOnly.install(on: channel)
        let activity = try? await channel.pipeline.handler(type: ConnectionActivity.self).get()
        activity?.enterWebSocket(on: channel.eventLoop)
        return Task {
            await WebSocketWatchdog(
                channel: channel, activity: activity, initialization: initialization,
                initTimeout: configuration.initTimeout, pingInterval: configuration.pingInterval,
                stalledWriteTimeout: configuration.stalledWriteTimeout, logger: logger
            ).run()
        }
    }
}
