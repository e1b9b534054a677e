import Foundation
import Logging
import NIOConcurrencyHelpers
import TelepatProtocol

/// One Engine.IO 3 session of the Telepat socket (its `sid`), whichever transport carries it:
/// long-polling (`TelepatPolling`), a WebSocket (`TelepatSocket`), or polling first and then a
/// WebSocket it upgrades to, as socket.io-client 1.x (the Telepat JS SDK's) does. Every packet
/// the client sends comes to `receive(_:)`, whatever carried it; every packet for the client
/// goes into `outbox`, which the transport of the moment drains.
///
/// The transport's life: `polling` -> `probing` (a WebSocket with this sid answered `2probe`;
/// a waiting poll is cut short with a noop so the client can pause polling) -> `webSocket` (the
/// client sent `5`); a probe that fails goes back to `polling`. A session opened on a WebSocket
/// starts at `webSocket`. A client silent for pingInterval + pingTimeout is closed (its pings
/// are its heartbeat), as is one whose outbox overflows.
final class TelepatSession: Sendable {
    enum Transport: Equatable, Sendable { case polling, probing, webSocket, closed }

    private struct State {
        var transport: Transport
        var lastHeard = ContinuousClock.now
        var device: String?
        /// A poll is waiting for packets (its number, to tell a later poll from it).
        var waitingPoll: Int?
        var polls = 0
        /// Closes the WebSocket of the session, if it has one.
        var closeWebSocket: (@Sendable () -> Void)?
    }

    let id: String
    /// The Engine.IO packets (rendered) waiting for the client.
    let outbox: Outbox
    private let frontEnd: TelepatFrontEnd
    private let sessions: TelepatSessions
    private let state: NIOLockedValueBox<State>
    private let watchdog = NIOLockedValueBox<Task<Void, Never>?>(nil)

    /// Most packets one poll answer carries (python-engineio 3 refuses a payload of more than 16).
    static let maxPacketsPerPoll = 16

    init(id: String, transport: Transport, frontEnd: TelepatFrontEnd, sessions: TelepatSessions) {
        self.id = id
        self.frontEnd = frontEnd
        self.sessions = sessions
        state = NIOLockedValueBox(State(transport: transport))
        // Weak: the outbox must not keep its session alive after it closed.
        let closing = NIOLockedValueBox(WeakSession())
        let logger = frontEnd.logger
        outbox = Outbox(
            limit: frontEnd.configuration.maxOutboundBufferBytes, meter: OutboxMeter(statistics: frontEnd.configuration.statistics, kind: .telepat)
        ) {
            logger.warning("closing a Telepat session whose client does not read (outbound buffer full)")
            closing.withLockedValue { $0.session }?.close()
        }
        closing.withLockedValue { $0.session = self }
    }

    /// Queues the handshake (`upgrades` offered) and the Socket.IO connect, and starts the
    /// silence watchdog.
    func open(upgrades: [String], pingInterval: Duration, pingTimeout: Duration) {
        let handshake = EngineIOHandshake(
            sessionID: id, upgrades: upgrades,
            pingInterval: Int(pingInterval / .milliseconds(1)), pingTimeout: Int(pingTimeout / .milliseconds(1))
        )
        outbox.enqueue(EngineIOPacket.open(handshake).render())
        outbox.enqueue(EngineIOPacket.message(SocketIOPacket(kind: .connect).render()).render())
        let silence = pingInterval + pingTimeout
        let logger = frontEnd.logger
        let task = Task { [weak self] in
            while !Task.isCancelled {
                try? await Task.sleep(for: .milliseconds(500))
                guard let self else { return }
                let lastHeard = self.state.withLockedValue { $0.lastHeard }
                if ContinuousClock.now - lastHeard > silence {
                    logger.info("closing a silent Telepat session")
                    self.close()
                    return
                }
            }
        }
        watchdog.withLockedValue { $0 = task }
    }

    var transport: Transport { state.withLockedValue { $0.transport } }

    /// Whether a device is bound (the session's log-in, as far as the connection cap goes).
    var isBound: Bool { state.withLockedValue { $0.device != nil } }

    /// The client was heard from (any packet or request of the session).
    func heard() {
        state.withLockedValue { $0.lastHeard = .now }
    }

    // MARK: Packets from the client, whatever carried them

    /// One Engine.IO packet from the client. `2probe` and `5` belong to the WebSocket that
    /// upgrades (`TelepatSocket`) and do not come here.
    func receive(_ packet: EngineIOPacket) {
        heard()
        switch packet {
        case .ping(let data): outbox.enqueue(EngineIOPacket.pong(data).render())
        case .close: close()
        case .message(let data): handle(data)
        case .open, .pong, .upgrade, .noop: break
        }
    }

    private func handle(_ data: String) {
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
            refuse(TelepatErrorResponse(.invalidApplication, "Unknown application"))
            return
        }
        // A device the API never registered is not bound: no `ready`, Telepat's error instead
        // (the SDK's `connect` then fails at once rather than waiting for notifications that
        // would never come).
        guard frontEnd.devices.isRegistered(device) else {
            refuse(TelepatErrorResponse(.deviceNotFound, "Device with ID \(device) not found"))
            return
        }
        let previous = state.withLockedValue { state -> String? in
            defer { state.device = device }
            return state.device
        }
        if let previous { frontEnd.devices.unbind(device: previous, outbox: outbox) }
        frontEnd.devices.bind(device: device, outbox: outbox)
        outbox.enqueue(TelepatSocketEvent.ready.frame)
    }

    private func refuse(_ error: TelepatErrorResponse) {
        outbox.enqueue(TelepatSocketEvent.other(name: "error", arguments: [error.json]).frame)
    }

    // MARK: Polling

    enum PollRefusal: Error { case notPolling, overlap }

    /// The packets for one long-polling GET: those waiting, or the first to come within
    /// `wait` (a noop when none does: the client polls again). Nil when the session closed
    /// meanwhile (the answer is then a close packet).
    func poll(wait: Duration) async throws(PollRefusal) -> [String]? {
        let admitted: Result<Int, PollRefusal> = state.withLockedValue { state in
            guard state.transport == .polling || state.transport == .probing else { return .failure(.notPolling) }
            guard state.waitingPoll == nil else { return .failure(.overlap) }
            state.polls += 1
            state.waitingPoll = state.polls
            state.lastHeard = .now
            return .success(state.polls)
        }
        let number = try admitted.get()
        // While a WebSocket probes, a poll does not wait: the client is pausing polling.
        if transport == .probing { outbox.enqueue(EngineIOPacket.noop.render()) }
        let timer = Task { [weak self] in
            try? await Task.sleep(for: wait)
            guard !Task.isCancelled, let self else { return }
            if self.state.withLockedValue({ $0.waitingPoll == number }) { self.outbox.enqueue(EngineIOPacket.noop.render()) }
        }
        defer { timer.cancel() }
        let first = await outbox.next()
        state.withLockedValue { $0.waitingPoll = nil }
        guard let first else {
            close()
            return nil
        }
        // After the upgrade, what is queued is the WebSocket's.
        guard transport != .webSocket else { return [first] }
        return [first] + outbox.takeQueued(limit: Self.maxPacketsPerPoll - 1)
    }

    /// A waiting poll is answered (with a noop when nothing else is queued).
    private func cutPollShort() {
        if state.withLockedValue({ $0.waitingPoll != nil }) { outbox.enqueue(EngineIOPacket.noop.render()) }
    }

    // MARK: Upgrade

    /// A WebSocket with this session's id was probed (`2probe`): true when the session polls.
    func beginProbe() -> Bool {
        let began = state.withLockedValue { state -> Bool in
            guard state.transport == .polling else { return false }
            state.transport = .probing
            state.lastHeard = .now
            return true
        }
        if began { cutPollShort() }
        return began
    }

    /// The client sent `5` on the probed WebSocket: it carries the session from now on.
    func completeUpgrade(closeWebSocket: @escaping @Sendable () -> Void) -> Bool {
        let upgraded = state.withLockedValue { state -> Bool in
            guard state.transport == .probing else { return false }
            state.transport = .webSocket
            state.closeWebSocket = closeWebSocket
            state.lastHeard = .now
            return true
        }
        if upgraded { cutPollShort() }
        return upgraded
    }

    /// The probe failed (the WebSocket closed or sent something else): back to polling.
    func abandonProbe() {
        state.withLockedValue { state in
            if state.transport == .probing { state.transport = .polling }
        }
    }

    /// A session opened on a WebSocket: `closeWebSocket` ends it when the session closes.
    func attach(closeWebSocket: @escaping @Sendable () -> Void) {
        state.withLockedValue { $0.closeWebSocket = closeWebSocket }
    }

    // MARK: Closing

    /// Ends the session: no more packets, the device unbound, the WebSocket (if any) closed.
    func close() {
        let (wasOpen, device, closeWebSocket) = state.withLockedValue { state -> (Bool, String?, (@Sendable () -> Void)?) in
            let wasOpen = state.transport != .closed
            state.transport = .closed
            defer {
                state.device = nil
                state.closeWebSocket = nil
            }
            return (wasOpen, state.device, state.closeWebSocket)
        }
        guard wasOpen else { return }
        watchdog.withLockedValue { $0 }?.cancel()
        if let device { frontEnd.devices.unbind(device: device, outbox: outbox) }
        outbox.finish()
        sessions.remove(self)
        closeWebSocket?()
    }
}

private struct WeakSession: Sendable {
    weak var session: TelepatSession?
}

/// The open Engine.IO sessions of the Telepat socket, by `sid` (a polling request and the
/// WebSocket that upgrades it find their session here).
final class TelepatSessions: Sendable {
    private let sessions = NIOLockedValueBox<[String: TelepatSession]>([:])
    let limit: Int

    init(limit: Int) {
        self.limit = limit
    }

    /// A new session, or nil when `limit` are open.
    func open(transport: TelepatSession.Transport, frontEnd: TelepatFrontEnd) -> TelepatSession? {
        let session = TelepatSession(id: UUID().uuidString.lowercased(), transport: transport, frontEnd: frontEnd, sessions: self)
        let added = sessions.withLockedValue { sessions -> Bool in
            guard sessions.count < limit else { return false }
            sessions[session.id] = session
            return true
        }
        return added ? session : nil
    }

    func session(_ id: String) -> TelepatSession? {
        sessions.withLockedValue { $0[id] }
    }

    func remove(_ session: TelepatSession) {
        sessions.withLockedValue { sessions in
            if sessions[session.id] === session { sessions[session.id] = nil }
        }
    }

    var count: Int { sessions.withLockedValue { $0.count } }
}
