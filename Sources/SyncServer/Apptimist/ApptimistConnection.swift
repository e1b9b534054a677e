import ApptimistCrypto
import ApptimistProtocol
import Hummingbird
import HummingbirdWebSocket
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOWebSocket

/// One WebSocket of `/SERVICE?<device key>`: PDUs in, handled one at a time in arrival order;
/// PDUs out through one outbox, each sealed with the next sequence number as it is queued (so
/// queue order is sequence order); queued messages delivered by a task of its own, woken when
/// the user's queue grows. Anything that breaks the connection's crypto or framing (a header
/// that does not open, a replayed sequence number, a truncated frame, an unknown type) closes
/// it; nothing of such a PDU is stored.
final class ApptimistConnection: Sendable {
    struct State {
        var user: ApptimistAccount?
        var paused = false
        /// The last queued message delivered (its seq in the user's queue).
        var cursor: Int64 = 0
    }

    let service: ApptimistService
    let identity: ApptimistIdentity
    /// The seed's fixed data nonce (`ApptimistServiceKey.dataNonce`): version 1 data is sealed with it.
    let dataNonce: [UInt8]
    let logger: Logger
    private let crypto: NIOLockedValueBox<ApptimistChannel>
    let outbox: FrameOutbox<[UInt8]>
    let state = NIOLockedValueBox(State())
    /// Who this connection's file locks are held by (this node and connection).
    let lockHolder: ApptimistLockHolder
    /// This side's header sequence ran out: nothing more can be sealed on this connection.
    private let exhausted = NIOLockedValueBox(false)
    private let wakeups: AsyncStream<Void>
    private let wakeup: AsyncStream<Void>.Continuation
    /// Ends the connection from anywhere (an exhausted sequence, a full outbox).
    private let closeChannel: @Sendable () -> Void

    var version: ApptimistVersion { crypto.withLockedValue { $0.version } }
    /// How the headers sent here are laid out: the one this version 1 client speaks.
    var headerLayout: ApptimistHeaderLayout { crypto.withLockedValue { $0.headerLayout } }
    var user: ApptimistAccount? { state.withLockedValue { $0.user } }

    private init(
        service: ApptimistService, identity: ApptimistIdentity, dataNonce: [UInt8], crypto: ApptimistChannel, logger: Logger,
        closeChannel: @escaping @Sendable () -> Void
    ) {
        self.service = service
        self.identity = identity
        self.dataNonce = dataNonce
        self.crypto = NIOLockedValueBox(crypto)
        self.logger = logger
        self.closeChannel = closeChannel
        lockHolder = service.nextLockHolder()
        outbox = FrameOutbox(
            limit: service.configuration.maxOutboundBufferBytes, meter: OutboxMeter(statistics: service.configuration.statistics, kind: .apptimist)
        ) {
            logger.warning("closing an Apptimist connection whose client does not read (outbound buffer full)")
            closeChannel()
        }
        (wakeups, wakeup) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
    }

    /// The device key of the seed's URI query (`?` then 64 hex digits), or nil.
    static func deviceKey(query: String?) -> [UInt8]? {
        guard let query, let key = ApptimistHex.decode(query), key.count == CryptoBox.keyLength else { return nil }
        return key
    }

    /// What handling one PDU leaves the connection to do.
    enum Verdict: Sendable, Equatable {
        case keepOpen
        case close(WebSocketErrorCode, String)
    }

    static func run(
        service: ApptimistService, version: ApptimistVersion, deviceKey: [UInt8], inbound: WebSocketInboundStream,
        outbound: WebSocketOutboundWriter, context: WebSocketRouterContext<ServerRequestContext>
    ) async throws {
        let channel = context.requestContext.channel
        var connectionLogger = service.logger
        connectionLogger[metadataKey: "peer"] = "\(channel.remoteAddress?.description ?? "?")"
        connectionLogger[metadataKey: "apptimist"] = "\(version.subprotocol)"
        let logger = connectionLogger
        let identity: ApptimistIdentity
        let dataNonce: [UInt8]
        let crypto: ApptimistChannel
        do {
            identity = try await service.identity()
            dataNonce = try ApptimistServiceKey(service: service.settings.service, identity: identity).dataNonce
            crypto = try ApptimistChannel(version: version, own: identity.box, peerPublicKey: deviceKey, serviceDataNonce: dataNonce)
        } catch {
            logger.error("cannot open an Apptimist connection: \(error)")
            try await outbound.close(.unexpectedServerError, reason: "service keys unavailable")
            return
        }
        let connection = ApptimistConnection(service: service, identity: identity, dataNonce: dataNonce, crypto: crypto, logger: logger) {
            channel.close(promise: nil)
        }
        let configuration = service.configuration
        configuration.statistics.webSocketOpened(.apptimist)
        defer { configuration.statistics.webSocketClosed(.apptimist) }
        // LOGIN is this protocol's init: a connection that has not logged in within the init
        // timeout is closed, as a Simperium socket without `init` is.
        let initialization = NIOLockedValueBox(WebSocketWatchdog.InitState.waiting)
        let watchdog = try await WebSocketWatchdog.watch(channel, initialization: initialization, configuration: configuration, logger: logger)
        let delivery = Task { await connection.deliverWhenWoken() }
        // A store other nodes write to (PostgreSQL): their messages for this user are looked
        // for this often, as this node hears only of its own.
        let poll = service.storage.pollInterval.map { interval in
            Task {
                while !Task.isCancelled {
                    try? await Task.sleep(for: interval)
                    connection.wake()
                }
            }
        }
        defer {
            watchdog.cancel()
            delivery.cancel()
            poll?.cancel()
            connection.end()
        }
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                while let frame = await connection.outbox.next() { try await outbound.write(.binary(ByteBuffer(bytes: frame))) }
                if connection.exhausted.withLockedValue({ $0 }) { try await outbound.close(.normalClosure, reason: Self.exhaustedReason) }
            }
            var verdict = Verdict.keepOpen
            for try await message in inbound.messages(maxSize: configuration.maxFrameSize) {
                guard case .binary(let buffer) = message else {
                    verdict = .close(.unacceptableData, "Apptimist PDUs are binary messages")
                    break
                }
                let wasDone = initialization.withLockedValue { state in
                    if state == .waiting { state = .handling }
                    return state == .done
                }
                verdict = await connection.receive(Array(buffer.readableBytesView))
                initialization.withLockedValue { $0 = connection.user == nil ? .waiting : .done }
                if !wasDone, connection.user != nil { ConnectionActivity.loggedIn(channel) }
                if verdict != .keepOpen { break }
            }
            connection.stopDelivering()
            connection.outbox.finish()
            let drain = Task {
                try await Task.sleep(for: StreamingEndpoint.drainTimeout)
                connection.outbox.abandon()
                channel.close(promise: nil)
            }
            defer { drain.cancel() }
            try await group.next()
            group.cancelAll()
            if case .close(let code, let reason) = verdict {
                logger.info("closing Apptimist connection", metadata: ["reason": "\(reason)"])
                try? await outbound.close(code, reason: StreamingEndpoint.truncated(reason))
            }
        }
    }

    /// Opens and handles one binary message.
    private func receive(_ bytes: [UInt8]) async -> Verdict {
        let received: ApptimistReceived
        do {
            received = try crypto.withLockedValue { try $0.open(bytes) }
        } catch {
            return .close(.protocolError, "\(error)")
        }
        do {
            try await answerInTheLayoutOf(received)
            return try await handle(received)
        } catch {
            logger.error("Apptimist store failure: \(error)")
            return .close(.unexpectedServerError, "storage unavailable; reconnect later")
        }
    }

    /// A version 1 client is answered in the header layout it speaks (`ApptimistHeaderLayout`):
    /// from its MESSAGE or search on, and (its account remembers) from its devices' next LOGIN,
    /// whose replay comes before they speak.
    private func answerInTheLayoutOf(_ received: ApptimistReceived) async throws {
        guard version == .v1, ApptimistHeaderLayout.differs(for: received.pdu.type), let user else { return }
        crypto.withLockedValue { $0.headerLayout = received.layout }
        guard user.headerLayout != received.layout else { return }
        try await service.storage.recordHeaderLayout(publicKey: user.publicKey, layout: received.layout)
        state.withLockedValue { $0.user?.headerLayout = received.layout }
    }

    /// Answers a version 1 device of `account` in the header layout its devices last spoke.
    func answerInTheLayoutOf(_ account: ApptimistAccount) {
        if version == .v1 { crypto.withLockedValue { $0.headerLayout = account.headerLayout } }
    }

    /// Seals `pdu` (and its already sealed data) with the next sequence number and queues it.
    /// A sequence that would wrap closes the connection instead (never a repeated nonce).
    @discardableResult
    func send(_ pdu: ApptimistPDU, data: ApptimistSealedData = .none) -> Bool {
        let failure = crypto.withLockedValue { channel -> ApptimistChannelError? in
            do throws(ApptimistChannelError) {
                let frame = try channel.seal(pdu, data: data)
                outbox.enqueue(frame)
                return nil
            } catch {
                return error
            }
        }
        guard let failure else { return true }
        if failure == .protocol(.sequenceExhausted) {
            // What is sealed still goes out; then the writer closes the connection.
            let first = exhausted.withLockedValue { exhausted in defer { exhausted = true }; return !exhausted }
            if first { logger.info("closing an Apptimist connection: its sequence is used up") }
            outbox.finish()
        } else {
            logger.info("closing an Apptimist connection: \(failure)")
            outbox.abandon()
            closeChannel()
        }
        return false
    }

    /// The reason a connection whose sequence ran out is closed with (after its queued PDUs).
    static let exhaustedReason = "the connection's sequence is used up; reconnect with a fresh device key"

    /// `plain` sealed from the service to the logged-in user (READ and LOCK contents, error texts).
    func sealForUser(_ plain: [UInt8]) -> ApptimistSealedData {
        guard let user else { return .none }
        let sealed = try? crypto.withLockedValue { channel in try channel.sealData(plain, to: user.publicKey, from: identity.box.secretKey) }
        return sealed ?? .none
    }

    /// Opens data the logged-in user sealed for the service (WRITE); nil when it does not open.
    func openFromUser(_ data: ApptimistSealedData) -> [UInt8]? {
        guard let user else { return nil }
        return try? crypto.withLockedValue { channel in try channel.openData(data, from: user.publicKey, to: identity.box.secretKey) }
    }

    // MARK: Delivery

    func wake() { wakeup.yield() }

    private func stopDelivering() { wakeup.finish() }

    private func end() {
        stopDelivering()
        outbox.abandon()
        service.ended(self, user: user?.publicKey)
    }

    /// Sends the user's queued messages after the cursor, whenever woken, until the connection ends.
    private func deliverWhenWoken() async {
        for await _ in wakeups {
            do {
                try await deliverQueued()
            } catch {
                logger.error("Apptimist delivery failed: \(error)")
                closeChannel()
                return
            }
        }
    }

    private static let deliveryBatch = 64

    private func deliverQueued() async throws {
        while true {
            let (user, paused, cursor) = state.withLockedValue { ($0.user, $0.paused, $0.cursor) }
            guard let user, !paused else { return }
            let batch = try await service.storage.messages(owner: user.publicKey, after: cursor, limit: Self.deliveryBatch)
            guard !batch.isEmpty else { return }
            let (version, layout) = crypto.withLockedValue { ($0.version, $0.headerLayout) }
            for message in batch {
                // Framed for this connection's version (a version 1 message's data part carries
                // the fixed nonce on version 2); one that cannot reach this version is skipped
                // (Docs/apptimist-protocol.md, "Across versions").
                if let rendition = try message.rendition(for: version, layout: layout, dataNonce: dataNonce),
                    !send(message.pdu, data: rendition.data)
                {
                    return
                }
                state.withLockedValue { $0.cursor = message.seq }
            }
        }
    }
}
