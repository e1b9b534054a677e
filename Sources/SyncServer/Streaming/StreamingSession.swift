import JSONDiff
import Logging
import SyncProtocol

/// The protocol state of one WebSocket connection: its channels and what each is authorized
/// for. Messages are handled one at a time in arrival order; replies and broadcasts go through
/// the connection's `Outbox`.
final class StreamingSession {
    /// What the connection should do after a message.
    enum Verdict: Equatable {
        case keepOpen
        /// Close the connection with a policy-violation reason (the client broke the protocol).
        case close(reason: String)
        /// Close the connection because the server cannot serve it for now (its database does
        /// not answer): the client reconnects with backoff and resends what was not acknowledged.
        case unavailable(reason: String)
    }

    private struct AuthorizedChannel {
        var bucket: BucketHandle
        var username: String
        var clientID: String
        var subscriptionID: UInt64
        /// Broadcasts are held until the channel's first command (`SubscriptionHub.subscribe`).
        var holdsBroadcasts = true
    }

    private let configuration: ServerConfiguration
    private let store: any ServerStorage
    private let hub: SubscriptionHub
    private let outbox: Outbox
    private let appID: String
    private let logger: Logger
    /// Called when a change could not be committed because the database does not answer.
    private let onUnavailable: @Sendable () -> Void
    private let inFlight = InFlightChanges(limit: StreamingSession.maxChangesInFlight)
    private var channels: [Int: AuthorizedChannel] = [:]

    /// The most channels one connection may authorize (each is a subscription).
    static let maxChannels = 256
    /// `offset` beyond this is answered as the end of the index (SQL OFFSET scans).
    static let maxIndexOffset = 1_000_000
    /// Changes of one connection waiting for the group commit before its reader pauses.
    static let maxChangesInFlight = 128

    init(
        configuration: ServerConfiguration, store: any ServerStorage, hub: SubscriptionHub, outbox: Outbox, appID: String, logger: Logger,
        onUnavailable: @escaping @Sendable () -> Void = {}
    ) {
        self.onUnavailable = onUnavailable
        self.configuration = configuration
        self.store = store
        self.hub = hub
        self.outbox = outbox
        self.appID = appID
        self.logger = logger
    }

    /// Whether a channel has been authorized (the connection passed its init deadline).
    var isInitialized: Bool { !channels.isEmpty }

    /// Drops every subscription of this connection.
    func close() {
        for channel in channels.values {
            hub.unsubscribe(bucketID: channel.bucket.id, subscriptionID: channel.subscriptionID)
        }
        channels = [:]
    }

    /// Waits until every change received so far has been answered (acknowledged or refused).
    func finishChanges() async {
        await inFlight.drained()
    }

    /// Handles one text message. Changes are pipelined (their replies come after the group
    /// commit); any other message first waits for them, so it sees their effects and its reply
    /// follows theirs, as if handled one by one.
    func handle(_ text: String) async -> Verdict {
        let frame: Frame
        do {
            frame = try Frame.parse(text, maxBytes: configuration.maxFrameSize)
        } catch {
            return .close(reason: "bad frame: \(error)")
        }
        // Changes are parsed change by change so that one bad change gets its own error reply.
        if frame.command == .changes, let channel = frame.channel {
            guard let payload = frame.payload, !payload.isEmpty else { return .close(reason: "c without payload") }
            return await handleChanges(payload: payload, channel: channel)
        }
        await inFlight.drained()
        let message: ClientMessage
        do {
            message = try ClientMessage(frame: frame)
        } catch {
            return .close(reason: "bad \(frame.command.rawValue) message: \(error)")
        }
        switch message {
        case .heartbeat(let count):
            send(ServerMessage.heartbeat(count &+ 1))
            return .keepOpen
        case .log:
            return .keepOpen
        case .channel(let channel, .initialize(let request)):
            return await initialize(request, channel: channel)
        case .channel(let channel, let channelMessage):
            return await handle(channelMessage, channel: channel)
        }
    }

    private func handle(_ message: ChannelClientMessage, channel: Int) async -> Verdict {
        guard let authorized = channels[channel] else {
            return .close(reason: "channel \(channel) used before a successful init")
        }
        if case .changeVersion = message {} else { deliverHeld(channel: channel, bucketID: authorized.bucket.id) }
        switch message {
        case .initialize(let request):
            return await initialize(request, channel: channel)
        case .index(let request):
            return await sendIndexPage(request, channel: channel, authorized: authorized)
        case .entity(let key, let version):
            return await sendEntity(key: key, version: version, channel: channel, authorized: authorized)
        case .changeVersion(let cv):
            return await sendChanges(since: cv, channel: channel, authorized: authorized)
        case .changes(let changes):
            for change in changes { await apply(change, channel: channel, authorized: authorized) }
            return .keepOpen
        case .indexReply:
            // Only meaningful after the server's `index` request, which this server never sends.
            return .keepOpen
        }
    }

    // MARK: - init

    private func initialize(_ request: InitRequest, channel: Int) async -> Verdict {
        if let previous = channels.removeValue(forKey: channel) {
            hub.unsubscribe(bucketID: previous.bucket.id, subscriptionID: previous.subscriptionID)
        }
        guard channels.count < Self.maxChannels else {
            return .close(reason: "more than \(Self.maxChannels) channels on one connection")
        }
        if let requested = request.appID, requested != appID {
            sendAuthError(channel: channel, code: 500, "app_id does not match the connection's app")
            return .keepOpen
        }
        guard AccessToken.isWellFormed(request.token) else {
            sendAuthError(channel: channel, code: 400, "Token format invalid")
            return .keepOpen
        }
        guard ServedBucketName.isServed(request.name) else {
            sendAuthError(channel: channel, code: 500, "Invalid bucket name")
            return .keepOpen
        }
        let user: AuthenticatedUser
        let bucket: BucketHandle
        do {
            guard let found = try await store.user(forToken: request.token) else {
                sendAuthError(channel: channel, code: 401, "Token invalid")
                return .keepOpen
            }
            user = found
            bucket = try await store.openBucket(userID: found.id, name: request.name)
        } catch {
            // An auth error would tell the client its bucket is refused; a closed connection
            // tells it to come back.
            if Self.isUnavailable(error) { return unavailable("init", error) }
            logger.error("init failed", metadata: ["error": "\(error)"])
            sendAuthError(channel: channel, code: 500, "Server error")
            return .keepOpen
        }
        let authReply = ServerMessage.channel(channel, .authOK(username: user.username)).render()
        let subscriptionID = hub.subscribe(
            bucketID: bucket.id, channel: channel, outbox: outbox, firstFrame: authReply, holdingBroadcasts: true
        )
        Task { [hub, hold = configuration.broadcastHoldAfterAuth] in
            try? await Task.sleep(for: hold)
            hub.release(bucketID: bucket.id, subscriptionID: subscriptionID, deliveringHeld: true)
        }
        // Reference clients always send one; without it dedup falls back to the ccid alone.
        let clientID = request.clientID ?? ""
        channels[channel] = AuthorizedChannel(bucket: bucket, username: user.username, clientID: clientID, subscriptionID: subscriptionID)
        logger.debug("channel authorized", metadata: ["channel": "\(channel)", "user": "\(user.username)", "bucket": "\(bucket.name)"])

        let command: ChannelClientMessage?
        do {
            command = try request.initialCommand()
        } catch {
            return .close(reason: "bad init cmd: \(error)")
        }
        if let command {
            if case .initialize = command { return .close(reason: "init cmd cannot be another init") }
            return await handle(command, channel: channel)
        }
        return .keepOpen
    }

    private func sendAuthError(channel: Int, code: Int, _ message: String) {
        send(.channel(channel, .authError(code: code, message: message)))
    }

    // MARK: - Held broadcasts

    /// Ends the channel's hold; returns its subscription when it was still holding, for the
    /// caller to release.
    private func takeHold(channel: Int) -> UInt64? {
        guard let authorized = channels[channel], authorized.holdsBroadcasts else { return nil }
        channels[channel]?.holdsBroadcasts = false
        return authorized.subscriptionID
    }

    /// A first command other than `cv:` ends the hold by delivering what was held.
    private func deliverHeld(channel: Int, bucketID: Int64) {
        guard let subscriptionID = takeHold(channel: channel) else { return }
        hub.release(bucketID: bucketID, subscriptionID: subscriptionID, deliveringHeld: true)
    }

    // MARK: - i, e, cv

    private func sendIndexPage(_ request: IndexRequest, channel: Int, authorized: AuthorizedChannel) async -> Verdict {
        var afterKey: String?
        if let mark = request.mark {
            guard let key = IndexCursor.decode(mark) else { return .close(reason: "unknown index mark") }
            afterKey = key
        }
        let requested = request.limit ?? 0
        let limit = requested > 0 ? min(requested, configuration.maxIndexPageSize) : configuration.defaultIndexPageSize
        let offset = request.offset.flatMap { Int($0) }.map { max(0, min($0, Self.maxIndexOffset)) } ?? 0
        let outbox = self.outbox
        do {
            try await store.readIndexPage(
                bucket: authorized.bucket, afterKey: afterKey, offset: offset, limit: limit,
                includeData: request.includeData, maxDataBytes: configuration.maxIndexPageDataBytes
            ) { page in
                outbox.enqueue(ServerMessage.channel(channel, .index(page)).render())
            }
        } catch {
            return internalFailure("index", error)
        }
        return .keepOpen
    }

    private func sendEntity(key: String, version: Int, channel: Int, authorized: AuthorizedChannel) async -> Verdict {
        do {
            let kept = try await store.entityVersion(bucket: authorized.bucket, key: key, version: version)
            let reply = kept.map { EntityReply.data($0.data, acceptedAt: $0.acceptedAt, ccid: $0.ccid) } ?? .unknown
            send(.channel(channel, .entity(key: key, version: version, reply)))
        } catch {
            return internalFailure("entity", error)
        }
        return .keepOpen
    }

    private func sendChanges(since cv: String, channel: Int, authorized: AuthorizedChannel) async -> Verdict {
        let outbox = self.outbox
        // The catch-up ends a hold: it is queued on the store's completion queue after every
        // broadcast so far, so it carries what was held, and later broadcasts follow it.
        let heldSubscription = takeHold(channel: channel)
        let hub = self.hub
        let bucketID = authorized.bucket.id
        do {
            try await store.readChanges(
                bucket: authorized.bucket, since: cv, maxDiffBytes: configuration.maxCatchUpBytes
            ) { [maxFrameBytes = configuration.maxFrameSize, history = store.history.number] catchUp in
                switch catchUp {
                case .unknown:
                    outbox.enqueue(ServerMessage.channel(channel, .changeVersionUnknown).render())
                case .changes(let changes):
                    for frame in CatchUpFrames.render(changes, history: history, channel: channel, maxFrameBytes: maxFrameBytes) {
                        outbox.enqueue(frame)
                    }
                }
                if let heldSubscription {
                    hub.release(bucketID: bucketID, subscriptionID: heldSubscription, deliveringHeld: false)
                }
            }
        } catch {
            if let heldSubscription {
                hub.release(bucketID: bucketID, subscriptionID: heldSubscription, deliveringHeld: true)
            }
            return internalFailure("cv", error)
        }
        return .keepOpen
    }

    // MARK: - c

    private func handleChanges(payload: String, channel: Int) async -> Verdict {
        guard let authorized = channels[channel] else {
            return .close(reason: "channel \(channel) used before a successful init")
        }
        deliverHeld(channel: channel, bucketID: authorized.bucket.id)
        let outcomes: [ChangeRequestOutcome]
        do {
            outcomes = try ChangeRequest.outcomes(payload: payload)
        } catch {
            return .close(reason: "bad c payload: \(error)")
        }
        for outcome in outcomes {
            switch outcome {
            case .valid(let change):
                await apply(change, channel: channel, authorized: authorized)
            case .invalid(var rejection, let error):
                rejection.clientID = rejection.clientID ?? authorized.clientID
                logger.debug("change refused", metadata: ["code": "\(rejection.code)", "reason": "\(error)"])
                configuration.statistics.changeRefused(via: .simperium, code: rejection.code)
                await replyInLine(ServerMessage.channel(channel, .changes([.rejected(rejection)])).render())
            }
        }
        return .keepOpen
    }

    /// Submits a change to the group commit; its acknowledgement (the broadcast) or refusal is
    /// queued after the commit, in order with this connection's other change replies.
    private func apply(_ change: ChangeRequest, channel: Int, authorized: AuthorizedChannel) async {
        let clientID = change.clientID ?? authorized.clientID
        if let forced = configuration.forcedChangeError?(change) {
            configuration.statistics.changeRefused(via: .simperium, code: forced)
            await replyInLine(Self.rejectionFrame(change, clientID: clientID, code: forced, channel: channel))
            return
        }
        let limits = ChangeLimits(
            maxDocumentSize: configuration.maxDocumentSize,
            historyPerEntity: configuration.historyPerEntity,
            changeLogRetention: configuration.changeLogRetention
        )
        let hub = self.hub
        let outbox = self.outbox
        let inFlight = self.inFlight
        let logger = self.logger
        let onUnavailable = self.onUnavailable
        let bucketID = authorized.bucket.id
        let statistics = configuration.statistics
        await inFlight.acquire()
        let submitted = ContinuousClock.now
        store.submit(change, clientID: clientID, bucket: authorized.bucket, limits: limits) { result in
            switch result {
            case .success(.accepted(let stored)):
                statistics.changeAccepted(via: .simperium, latency: ContinuousClock.now - submitted)
                hub.publish(bucketID: bucketID, change: stored)
            case .success(.refused(let code)):
                statistics.changeRefused(via: .simperium, code: code.rawValue, latency: ContinuousClock.now - submitted)
                outbox.enqueue(Self.rejectionFrame(change, clientID: clientID, code: code.rawValue, channel: channel))
            case .failure(let error) where Self.isUnavailable(error):
                // No answer for the change, only the connection closed (1011): every client sends
                // a change it has no answer for again after reconnecting, but some take an error
                // code as final (node-simperium emits 500 as an error and drops the change, so its
                // later changes to the entity are answered 405). The commit may have gone in; the
                // resend is then answered as a duplicate (409), which every client takes as done.
                logger.warning("change not committed: database unavailable", metadata: ["key": "\(change.id)", "error": "\(error)"])
                statistics.databaseUnavailable(operation: "change")
                onUnavailable()
            case .failure(let error):
                logger.error("change failed", metadata: ["key": "\(change.id)", "error": "\(error)"])
                statistics.changeRefused(via: .simperium, code: ChangeErrorCode.internalError.rawValue, latency: ContinuousClock.now - submitted)
                outbox.enqueue(Self.rejectionFrame(change, clientID: clientID, code: ChangeErrorCode.internalError.rawValue, channel: channel))
            }
            inFlight.release()
        }
    }

    /// Queues `frame` behind the replies of the changes already submitted.
    private func replyInLine(_ frame: String) async {
        let outbox = self.outbox
        let inFlight = self.inFlight
        await inFlight.acquire()
        store.submitInLine {
            outbox.enqueue(frame)
            inFlight.release()
        }
    }

    private static func rejectionFrame(_ change: ChangeRequest, clientID: String, code: Int, channel: Int) -> String {
        let rejection = ChangeRejection(clientID: clientID, id: change.id, ccids: [change.ccid], code: code)
        return ServerMessage.channel(channel, .changes([.rejected(rejection)])).render()
    }

    // MARK: - Output

    private func send(_ message: ServerMessage) {
        outbox.enqueue(message.render())
    }

    private func internalFailure(_ command: String, _ error: any Error) -> Verdict {
        if Self.isUnavailable(error) { return unavailable(command, error) }
        logger.error("\(command) failed", metadata: ["error": "\(error)"])
        return .close(reason: "internal error")
    }

    private func unavailable(_ command: String, _ error: any Error) -> Verdict {
        logger.warning("\(command): database unavailable; closing the connection", metadata: ["error": "\(error)"])
        return .unavailable(reason: StreamingEndpoint.unavailableReason)
    }

    static func isUnavailable(_ error: any Error) -> Bool {
        if case .databaseUnavailable? = error as? SyncServerError { return true }
        return false
    }
}
