import HummingbirdCore
import Logging
import NIOCore
import ServiceLifecycle

/// Wraps the server's child channel (HTTP with WebSocket upgrade) with what every connection
/// needs whatever it speaks: `ConnectionActivity` first in its pipeline (deadlines), and a hard
/// close `shutdownGrace` after a graceful shutdown begins (issue 20: SIGTERM never finished
/// while an idle or stuck peer was connected: the WebSocket close handshake waits on the peer,
/// and a close frame cannot be written to a peer that does not read).
struct GuardedChildChannel<Base: ServerChildChannel>: ServerChildChannel {
    typealias Value = Base.Value

    let base: Base
    let requestTimeout: Duration
    let shutdownGrace: Duration
    let statistics: ServerStatistics
    let cap: ConnectionCap
    let shutdown: ShutdownState

    /// A connection past the cap, closed at once.
    struct Refused: Error {}

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        guard cap.admit(channel, logger: logger) else { return channel.eventLoop.makeFailedFuture(Refused()) }
        do {
            // Appended before the base's handlers: first in a plain pipeline, after TLS in a
            // TLS one (TLSChannel adds its handler, then sets its base up).
            try channel.pipeline.syncOperations.addHandler(
                ConnectionActivity(requestTimeout: requestTimeout, statistics: statistics, logger: logger) { [cap, id = ObjectIdentifier(channel)] in
                    cap.loggedIn(id)
                })
        } catch {
            return channel.eventLoop.makeFailedFuture(error)
        }
        return base.setup(channel: channel, logger: logger)
    }

    func handle(value: Value, logger: Logger) async {
        let channel = value.channel
        let grace = TimeAmount(shutdownGrace)
        statistics.connectionOpened()
        statistics.track(channel)
        defer { statistics.connectionClosed() }
        // Nil only when the connection closed before its handling began (nothing to filter then).
        let activity = try? await channel.eventLoop.submit {
            try channel.pipeline.syncOperations.handler(type: ConnectionActivity.self)
        }.get()
        var handlingLogger = logger
        if let activity { handlingLogger.handler = OwnCloseLogFilter(base: logger.handler, activity: activity) }
        await withGracefulShutdownHandler {
            await base.handle(value: value, logger: handlingLogger)
        } onGracefulShutdown: {
            shutdown.begin()
            activity?.shutdownBegan(channel)
            channel.eventLoop.scheduleTask(in: grace) {
                if channel.isActive { logger.info("closing a connection still open after the shutdown grace period") }
                channel.close(promise: nil)
            }
        }
    }
}
