import Foundation
import Hummingbird
import HummingbirdWebSocket
import Logging
import NIOConcurrencyHelpers
import NIOCore
import TelepatProtocol

/// One Engine.IO 3 WebSocket of `/socket.io/?EIO=3&transport=websocket`: the handshake, the
/// Socket.IO connect, pongs to the client's pings, `bind_device` answered `ready`, then the
/// device's notifications. A client silent for pingInterval + pingTimeout is closed: that, not
/// the HTTP request timeout, is the socket's deadline (the client pings every pingInterval,
/// longer than the request timeout, so that deadline cut every socket after 10 s).
struct TelepatSocket: Sendable {
    let frontEnd: TelepatFrontEnd
    let pingInterval: Duration
    let pingTimeout: Duration

    func run(inbound: WebSocketInboundStream, outbound: WebSocketOutboundWriter, context: WebSocketRouterContext<ServerRequestContext>) async throws {
        let channel = context.requestContext.channel
        let logger = frontEnd.logger
        let outbox = Outbox(limit: frontEnd.configuration.maxOutboundBufferBytes) {
            logger.warning("closing a Telepat socket whose client does not read (outbound buffer full)")
            channel.close(promise: nil)
        }
        frontEnd.configuration.statistics.webSocketOpened()
        defer { frontEnd.configuration.statistics.webSocketClosed() }
        let activity = try? await channel.pipeline.handler(type: ConnectionActivity.self).get()
        activity?.enterWebSocket(on: channel.eventLoop)
        let handshake = EngineIOHandshake(
            sessionID: UUID().uuidString.lowercased(),
            pingInterval: Int(pingInterval / .milliseconds(1)), pingTimeout: Int(pingTimeout / .milliseconds(1))
        )
        outbox.enqueue(EngineIOPacket.open(handshake).render())
        outbox.enqueue(EngineIOPacket.message(SocketIOPacket(kind: .connect).render()).render())
        let lastHeard = NIOLockedValueBox(ContinuousClock.now)
        let bound = NIOLockedValueBox<String?>(nil)
        let silence = pingInterval + pingTimeout
        let watchdog = Task {
            while !Task.isCancelled {
                try? await Task.sleep(for: .milliseconds(500))
                if ContinuousClock.now - lastHeard.withLockedValue({ $0 }) > silence {
                    logger.info("closing a silent Telepat socket")
                    channel.close(promise: nil)
                    return
                }
            }
        }
        defer {
            watchdog.cancel()
            if let device = bound.withLockedValue({ $0 }) { frontEnd.devices.unbind(device: device, outbox: outbox) }
            outbox.abandon()
        }
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                while let frame = await outbox.next() { try await outbound.writeTextMessage(frame) }
            }
            reading: for try await message in inbound.messages(maxSize: frontEnd.configuration.maxFrameSize) {
                lastHeard.withLockedValue { $0 = .now }
                guard case .text(let text) = message else { break }
                let packet: EngineIOPacket
                do {
                    packet = try EngineIOPacket.parse(text)
                } catch {
                    logger.info("closing a Telepat socket after a malformed packet", metadata: ["error": "\(error)"])
                    break
                }
                switch packet {
                case .ping(let data): outbox.enqueue(EngineIOPacket.pong(data).render())
                case .close: break reading
                case .message(let data): handle(data, outbox: outbox, bound: bound)
                case .open, .pong, .upgrade, .noop: continue
                }
            }
            outbox.finish()
            try await group.next()
            group.cancelAll()
        }
    }

    private func handle(_ data: String, outbox: Outbox, bound: NIOLockedValueBox<String?>) {
        let packet: SocketIOPacket
        let event: TelepatSocketEvent
        do {
            packet = try SocketIOPacket.parse(data)
            guard packet.kind == .event else { return }
            event = try TelepatSocketEvent(packet: packet)
        } catch {
            let refusal = SocketIOPacket(kind: .error, data: .string("\(error)"))
            outbox.enqueue(EngineIOPacket.message(refusal.render()).render())
            return
        }
        guard case .bindDevice(let device, let applicationID) = event else { return }
        guard frontEnd.settings.applications[applicationID] != nil else {
            outbox.enqueue(TelepatSocketEvent.other(name: "error", arguments: [TelepatErrorResponse(.invalidApplication, "Unknown application").json]).frame)
            return
        }
        if let previous = bound.withLockedValue({ $0 }) { frontEnd.devices.unbind(device: previous, outbox: outbox) }
        bound.withLockedValue { $0 = device }
        frontEnd.devices.bind(device: device, outbox: outbox)
        outbox.enqueue(TelepatSocketEvent.ready.frame)
    }
}
