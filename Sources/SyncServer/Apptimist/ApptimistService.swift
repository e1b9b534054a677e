import ApptimistCrypto
import ApptimistProtocol
import Foundation
import Hummingbird
import Logging
import NIOConcurrencyHelpers

/// One Apptimist App-Server: its keys, its store, and what its connections share (who is
/// logged in where, for message delivery and TRUNCATE echoes; the file locks are the store's).
final class ApptimistService: Sendable {
    let settings: ApptimistSettings
    let configuration: ServerConfiguration
    let storage: any ApptimistStorage
    let logger: Logger
    private let identityCache = NIOLockedValueBox<ApptimistIdentity?>(nil)
    private let sessions = NIOLockedValueBox<[[UInt8]: [ObjectIdentifier: ApptimistConnection]]>([:])
    /// This node among the nodes of one store (random per start): the first part of its
    /// connections' lock holders.
    private let node: [UInt8] = (0 ..< 16).map { _ in UInt8.random(in: 0 ... 255) }
    private let connectionCount = NIOLockedValueBox<UInt64>(0)

    init(settings: ApptimistSettings, configuration: ServerConfiguration, storage: any ApptimistStorage, logger: Logger) {
        self.settings = settings
        self.configuration = configuration
        self.storage = storage
        self.logger = logger
    }

    /// The lock holder a new connection of this node takes file locks as.
    func nextLockHolder() -> ApptimistLockHolder {
        ApptimistLockHolder(node: node, connection: connectionCount.withLockedValue { count in
            count += 1
            return count
        })
    }

    /// The service's key pairs (made and stored on first use).
    func identity() async throws -> ApptimistIdentity {
        if let identity = identityCache.withLockedValue({ $0 }) { return identity }
        let identity = try await storage.serviceIdentity()
        identityCache.withLockedValue { $0 = identity }
        return identity
    }

    func serviceKey() async throws -> ApptimistServiceKey {
        try ApptimistServiceKey(service: settings.service, identity: try await identity())
    }

    // MARK: Routes

    func register(router: Router<ServerRequestContext>, webSocketRouter: Router<ServerRequestContext>) {
        let path = RouterPath("/" + settings.service)
        router.get(path) { [self] _, _ -> Response in
            let key = try await serviceKey()
            var headers = HTTPFields()
            headers[.contentType] = "application/json"
            return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: Array(key.json(server: configuration.software)))))
        }
        webSocketRouter.ws(path) { request, context in
            // The seed's URI query is the device's ephemeral public key as 64 hex digits.
            guard ApptimistConnection.deviceKey(query: request.uri.query) != nil else {
                let activity = try? await context.channel.pipeline.handler(type: ConnectionActivity.self).get()
                activity?.answerRefusedUpgradeWithNotFound(on: context.channel.eventLoop)
                return .dontUpgrade
            }
            let version = ApptimistVersion.serverChoice(offered: Self.offeredSubprotocols(request.headers))
            var headers = HTTPFields()
            // A seed client offered nothing and gets no subprotocol back (Docs/apptimist-protocol.md).
            if Self.offeredSubprotocols(request.headers).contains(version.subprotocol) {
                headers[.secWebSocketProtocol] = version.subprotocol
            }
            return .upgrade(headers)
        } onUpgrade: { [self] inbound, outbound, context in
            context.requestContext.releaseWebSocket()
            let offered = Self.offeredSubprotocols(context.request.headers)
            let version = ApptimistVersion.serverChoice(offered: offered)
            guard let device = ApptimistConnection.deviceKey(query: context.request.uri.query) else { return }
            try await ApptimistConnection.run(
                service: self, version: version, deviceKey: device, inbound: inbound, outbound: outbound, context: context)
        }
    }

    static func offeredSubprotocols(_ headers: HTTPFields) -> [String] {
        headers[values: .secWebSocketProtocol].flatMap { $0.split(separator: ",").map { String($0).trimmingCharacters(in: .whitespaces) } }
    }

    // MARK: Sessions

    func loggedIn(_ connection: ApptimistConnection, user: [UInt8]) {
        sessions.withLockedValue { $0[user, default: [:]][ObjectIdentifier(connection)] = connection }
    }

    func ended(_ connection: ApptimistConnection, user: [UInt8]?) {
        // Off the closing path (the store may be a network away); a lock not released here
        // (the store unreachable) expires.
        Task { [storage, logger, holder = connection.lockHolder] in
            do {
                try await storage.releaseLocks(holder: holder)
            } catch {
                logger.warning("releasing a closed Apptimist connection's locks failed (they expire): \(error)")
            }
        }
        guard let user else { return }
        sessions.withLockedValue { sessions in
            sessions[user]?[ObjectIdentifier(connection)] = nil
            if sessions[user]?.isEmpty == true { sessions[user] = nil }
        }
    }

    private func connections(of user: [UInt8]) -> [ApptimistConnection] {
        sessions.withLockedValue { Array(($0[user] ?? [:]).values) }
    }

    /// New messages were queued for `owner`: its connections deliver them (unless paused).
    func messagesQueued(for owner: [UInt8]) {
        for connection in connections(of: owner) { connection.wake() }
    }

    /// The file notice of `owner`'s file `name` now holding `contents` (nil: removed), to queue
    /// with the change (Docs/apptimist-protocol.md, "File notices"): a MESSAGE from the service
    /// to the owner, `recipient` = `to` = the owner, its data the notice's JSON sealed by the
    /// service to the owner. Always version 2: a fresh random data nonce each (version 1's fixed
    /// nonce, under the one service-owner key pair, would repeat with every notice). Its id is
    /// the seed's, as for every message.
    func fileNotice(owner: [UInt8], name: [UInt8], contents: [UInt8]?) async throws -> ApptimistQueuedMessage {
        try Self.fileNotice(identity: try await identity(), owner: owner, name: name, contents: contents)
    }

    static func fileNotice(identity: ApptimistIdentity, owner: [UInt8], name: [UInt8], contents: [UInt8]?) throws -> ApptimistQueuedMessage {
        let notice = if let contents { try ApptimistFileNotice.written(name, contents: contents) } else { ApptimistFileNotice(file: name, operation: .remove) }
        return try serviceMessage(identity: identity, owner: owner, json: notice.json())
    }

    /// A MESSAGE from the service to `owner` whose data is `json` sealed to it (a file notice,
    /// an undelivered message's bounce): version 2, a fresh random data nonce each.
    static func serviceMessage(identity: ApptimistIdentity, owner: [UInt8], json: [UInt8]) throws -> ApptimistQueuedMessage {
        let nonce = try CryptoBox.randomNonce()
        let data = ApptimistSealedData(
            nonce: nonce,
            sealed: try CryptoBox.seal(json, nonce: nonce, recipientPublicKey: owner, senderSecretKey: identity.box.secretKey))
        let pdu = ApptimistPDU.message(
            time: UInt64(max(0, Date().timeIntervalSince1970)), recipient: owner, to: owner, from: identity.box.publicKey)
        return try ApptimistQueuedMessage(version: .v2, pdu: pdu, data: data)
    }

    /// A TRUNCATE of `owner`'s: every one of its connections hears the echo, naming the message
    /// by the id it has there (`rendition`: a version 1 message has another on version 2, and
    /// another on a version 1 connection that speaks the seed's header lines); the id as sent
    /// when the message is unknown (truncated already).
    func truncated(owner: [UInt8], id: [UInt8], message: ApptimistQueuedMessage?) {
        for connection in connections(of: owner) {
            let known = (try? message?.rendition(for: connection.version, layout: connection.headerLayout, dataNonce: connection.dataNonce))??.id
            connection.send(.truncate(messageID: known ?? id))
        }
    }
}

/// File locks (LOCK until WRITE or REMOVE), per owner and file name, held by a connection, in
/// memory: the SQLite store's (one node; a lock ends with its connection, so a restarted server
/// rightly has none, and clients LOCK again when they reconnect).
final class ApptimistFileLocks: Sendable {
    struct Key: Hashable, Sendable {
        var owner: [UInt8]
        var name: [UInt8]
    }

    private struct Lock {
        var holder: ApptimistLockHolder
        var expiry: ContinuousClock.Instant
    }

    private let held = NIOLockedValueBox<[Key: Lock]>([:])

    /// Takes (or renews) the lock for `holder`; false when another holder's has not expired.
    func take(_ key: Key, by holder: ApptimistLockHolder, lifetime: Duration) -> Bool {
        held.withLockedValue { held in
            let now = ContinuousClock.now
            if let lock = held[key], lock.holder != holder, now < lock.expiry { return false }
            held[key] = Lock(holder: holder, expiry: now + lifetime)
            return true
        }
    }

    /// Whether someone other than `holder` holds a live lock on `key`.
    func isHeld(_ key: Key, byOtherThan holder: ApptimistLockHolder) -> Bool {
        held.withLockedValue { held in
            guard let lock = held[key] else { return false }
            return lock.holder != holder && ContinuousClock.now < lock.expiry
        }
    }

    func release(_ key: Key, by holder: ApptimistLockHolder) {
        held.withLockedValue { held in
            if held[key]?.holder == holder { held[key] = nil }
        }
    }

    func releaseAll(of holder: ApptimistLockHolder) {
        held.withLockedValue { held in held = held.filter { $0.value.holder != holder } }
    }
}
