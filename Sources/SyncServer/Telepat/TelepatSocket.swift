import Foundation
import Hummingbird
import HummingbirdWebSocket
import Logging
import NIOCore
import TelepatProtocol

/// The WebSocket transport of the Telepat socket, `/socket.io/?EIO=3&transport=websocket`:
///
/// - without a `sid`, a session of its own (`TelepatSession`): the handshake (no upgrades), the
///   Socket.IO connect, then the client's packets to the session and the session's to the client;
/// - with the `sid` of a polling session, the upgrade (Engine.IO 3): `2probe` is answered
///   `3probe` here, the client's `5` moves the session onto this socket, and it carries the
///   session from then on. A probe that fails leaves the session polling.
///
/// A client silent for pingInterval + pingTimeout is closed by its session: that, not the HTTP
/// request timeout, is the socket's deadline (the client pings every pingInterval, longer than
/// the request timeout, so that deadline cut every socket after 10 s).
struct TelepatSocket: Sendable {
    let frontEnd: TelepatFrontEnd
    let sessions: TelepatSessions
    let pingInterval: Duration
    let pingTimeout: Duration

    /// Whether a WebSocket request may upgrade: a new session, or a polling one to probe.
    func accepts(_ request: Request) -> Bool {
        let query = request.uri.queryParameters
        guard query.get("EIO") == "3" || query.get("EIO") == nil else { return false }
        guard let sid = query.get("sid") else { return sessions.count < sessions.limit }
        return sessions.session(sid)?.transport == .polling
    }

    func run(inbound: WebSocketInboundStream, outbound: WebSocketOutboundWriter, context: WebSocketRouterContext<ServerRequestContext>) async throws {
        let channel = context.requestContext.channel
        let logger = frontEnd.logger
        frontEnd.configuration.statistics.webSocketOpened(.telepat)
        defer { frontEnd.configuration.statistics.webSocketClosed(.telepat) }
        let activity = try? await channel.pipeline.handler(type: ConnectionActivity.self).get()
        activity?.enterWebSocket(on: channel.eventLoop)
        let closeChannel: @Sendable () -> Void = { channel.close(promise: nil) }

        var messages = inbound.messages(maxSize: frontEnd.configuration.maxFrameSize).makeAsyncIterator()
        let session: TelepatSession
        if let sid = context.request.uri.queryParameters.get("sid").map { String($0) } {
            guard let probed = sessions.session(sid), try await upgrade(probed, messages: &messages, outbound: outbound, closeChannel: closeChannel) else {
                return
            }
            session = probed
        } else {
            guard let opened = sessions.open(transport: .webSocket, frontEnd: frontEnd) else {
                logger.warning("refusing a Telepat socket: too many sessions")
                return
            }
            opened.attach(closeWebSocket: closeChannel)
            opened.open(upgrades: [], pingInterval: pingInterval, pingTimeout: pingTimeout)
            session = opened
        }
        defer { session.close() }
        let outbox = session.outbox
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                while let frame = await outbox.next() { try await outbound.writeTextMessage(frame) }
            }
            var loggedIn = false
            reading: while let message = try await messages.next() {
                session.heard()
                guard case .text(let text) = message else { break }
                let packet: EngineIOPacket
                do {
                    packet = try EngineIOPacket.parse(text)
                } catch {
                    logger.info("closing a Telepat socket after a malformed packet", metadata: ["error": "\(error)"])
                    break
                }
                session.receive(packet)
                if !loggedIn, session.isBound {
                    loggedIn = true
                    ConnectionActivity.loggedIn(channel)
                }
                if case .close = packet { break reading }
            }
            outbox.finish()
            try await group.next()
            group.cancelAll()
        }
    }

    /// The Engine.IO 3 upgrade of a polling session onto this socket: `2probe` -> `3probe`,
    /// then `5`. True once the session is this socket's.
    private func upgrade(
        _ session: TelepatSession, messages: inout WebSocketInboundMessageStream.AsyncIterator, outbound: WebSocketOutboundWriter,
        closeChannel: @escaping @Sendable () -> Void
    ) async throws -> Bool {
        guard case .text(let probe)? = try await messages.next(), (try? EngineIOPacket.parse(probe)) == .ping("probe"),
              session.beginProbe()
        else { return false }
        do {
            try await outbound.writeTextMessage(EngineIOPacket.pong("probe").render())
            guard case .text(let text)? = try await messages.next(), (try? EngineIOPacket.parse(text)) == .upgrade else {
                session.abandonProbe()
                return false
            }
        } catch {
            session.abandonProbe()
            throw error
        }
        return session.completeUpgrade(closeWebSocket: closeChannel)
    }
}
