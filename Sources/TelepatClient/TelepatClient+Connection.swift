import Foundation
import Synchronization
import HummingbirdWSClient
import JSONDiff
import Logging
import SyncEngine
import SyncStore
import TelepatProtocol

extension TelepatClient {
    /// Prepare (device, login, contexts), connect, serve the socket until it ends, wait
    /// (exponential backoff with jitter), repeat.
    func connectionLoop() async {
        var backoff = Backoff(initial: configuration.initialBackoff, maximum: configuration.maximumBackoff)
        var generator = SystemRandomNumberGenerator()
        var attempt = 0
        var offlineSince = Date()
        while running && !Task.isCancelled {
            attempt += 1
            stateBroadcaster.publish(.connecting(attempt: attempt))
            var reason = "connection closed"
            let started = ContinuousClock.now
            do {
                try await prepare()
                let closing = try await WebSocketClient.connect(
                    url: configuration.socketURL,
                    configuration: WebSocketClientConfiguration(maxFrameSize: configuration.maxMessageBytes, closeTimeout: .seconds(2)),
                    logger: logger
                ) { inbound, outbound, _ in
                    try await self.serve(inbound: inbound, outbound: outbound)
                }
                if let closing { reason = "closed by the server (\(closing.closeCode)\(closing.reason.map { ": \($0)" } ?? ""))" }
            } catch {
                reason = String(describing: error)
                logger.debug("telepat connection ended: \(reason)")
            }
            let wasReady = connectionEnded()
            if wasReady {
                if ContinuousClock.now - started >= configuration.stableConnection { backoff.reset() }
                attempt = 0
                offlineSince = Date()
            }
            guard running && !Task.isCancelled else { break }
            let delay = backoff.nextDelay(using: &generator)
            let seconds = Double(delay.components.seconds) + Double(delay.components.attoseconds) / 1e18
            stateBroadcaster.publish(.offline(since: offlineSince, retryAt: Date().addingTimeInterval(seconds), reason: reason))
            await sleepUnlessWoken(delay)
        }
    }

    /// The device id (registered once, kept in the store), a token that is not about to
    /// expire, and the application's contexts.
    func prepare() async throws {
        // An empty setting is a device the server forgot (`forgetDevice`).
        if deviceID == nil { deviceID = try store.engineSetting(Self.deviceSetting).flatMap { $0.isEmpty ? nil : $0 } }
        if deviceID == nil {
            let body: JSONValue = ["info": ["os": "Linux", "model": "bucketfs"]]
            let answer = try await http.call("/device/register", body: body, device: nil, token: nil)
            guard let identifier = answer["identifier"]?.stringValue else {
                throw TelepatCallError.unreachable("/device/register answered no identifier")
            }
            try store.setEngineSetting(Self.deviceSetting, to: identifier)
            deviceID = identifier
            logger.info("registered this mount with Telepat as device \(identifier)")
        }
        try await ensureToken()
        let contexts = try await authorized { http, device, token in
            try await http.call("/context/all", device: device, token: token)
        }
        var ids: [String: String] = [:]
        for context in contexts.arrayValue ?? [] {
            guard let id = context["id"]?.stringValue else { continue }
            ids[id] = id
            if let name = context["name"]?.stringValue, ids[name] == nil { ids[name] = id }
        }
        contextIDs = ids
        if configuration.buckets.isEmpty { try mirrorEveryDeclaredModel(contexts) }
    }

    /// No model named: every model of every context the application declares (a server that
    /// lists a context's `models`, as bucketfs's does) becomes a bucket.
    func mirrorEveryDeclaredModel(_ contexts: JSONValue) throws {
        for context in contexts.arrayValue ?? [] {
            guard let name = context["name"]?.stringValue ?? context["id"]?.stringValue else { continue }
            for model in (context["models"]?.arrayValue ?? []).compactMap(\.stringValue) {
                guard let bucket = TelepatBucket("\(name)/\(model)"), buckets[bucket.name] == nil else { continue }
                _ = try store.ensureBucket(bucket.name)
                buckets[bucket.name] = bucket
            }
        }
        if buckets.isEmpty { logger.warning("telepat: the server declares no models: name them with --bucket CONTEXT/MODEL") }
    }

    /// Logs in when there is no token, or renews one that expires within the margin (a token
    /// whose expiry cannot be read is used until the server refuses it).
    func ensureToken() async throws {
        if let current = token {
            guard let due = JWTExpiry.renewal(of: current, margin: configuration.tokenRenewalMargin), due <= Date() else { return }
            if await refresh(current) { return }
        }
        try await login()
    }

    /// `/user/refresh_token`: true when the server gave a new token (now in use).
    func refresh(_ current: String) async -> Bool {
        guard let renewed = try? await http.call("/user/refresh_token", method: "GET", device: deviceID, token: current)["token"]?.stringValue
        else { return false }
        adopt(token: renewed)
        return true
    }

    /// A new token from the server: used from now on, and handed to `tokenRenewed`.
    func adopt(token fresh: String) {
        guard fresh != token else { return }
        token = fresh
        logger.debug("telepat: a new token, valid until \(JWTExpiry.of(fresh).map { "\($0)" } ?? "an unknown time")")
        configuration.tokenRenewed?(fresh)
    }

    /// While connected: renews the token before it expires, so a mount that only listens still
    /// has a valid one for its next save, and a saved remote a valid one to start again with.
    func renewTokenWhileConnected() async {
        var retry = 5
        while !Task.isCancelled {
            guard let current = token, let due = JWTExpiry.renewal(of: current, margin: configuration.tokenRenewalMargin) else { return }
            do { try await Task.sleep(for: .milliseconds(Int64(max(due.timeIntervalSinceNow, 0) * 1000))) } catch { return }
            // (Renewed meanwhile when a call found it due: then only wait for the new one's time.)
            if token == current, !(await refresh(current)), case .password = configuration.login {
                do { try await login() } catch { logger.warning("telepat: cannot renew the token: \(error)") }
            }
            guard token == current else {
                retry = 5
                continue
            }
            // Not renewed (refused, or the server is away): try again later, less and less often.
            logger.warning("telepat: the server did not renew the token; trying again in \(retry) s")
            do { try await Task.sleep(for: .seconds(retry)) } catch { return }
            retry = min(retry * 2, 300)
        }
    }

    func login() async throws {
        guard case .password(let username, let password) = configuration.login else {
            if token == nil { throw TelepatCallError.unreachable("no token to log in with") }
            return
        }
        let body: JSONValue = ["username": .string(username), "password": .string(password)]
        do {
            let answer = try await http.call("/user/login-password", body: body, device: deviceID, token: nil)
            guard let fresh = answer["token"]?.stringValue else { throw TelepatCallError.unreachable("the login answered no token") }
            adopt(token: fresh)
        } catch let error as TelepatCallError {
            if let status = error.status, status == 401 || status == 403 || status == 404 { reportAuthFailure(error) }
            throw error
        }
    }

    /// Runs a call with the token; a 401 logs in again (when the engine can) and tries once more.
    func authorized<T: Sendable>(_ call: (TelepatHTTP, _ device: String?, _ token: String?) async throws -> T) async throws -> T {
        try await ensureToken()
        do {
            return try await call(http, deviceID, token)
        } catch let error as TelepatCallError where error.status == 401 {
            guard case .password = configuration.login else {
                reportAuthFailure(error)
                throw error
            }
            token = nil
            try await login()
            return try await call(http, deviceID, token)
        }
    }

    func reportAuthFailure(_ error: TelepatCallError) {
        let failure: AuthFailure
        switch error {
        case .refused(let refusal): failure = AuthFailure(code: refusal.status, message: refusal.message)
        case .unreachable(let reason): failure = .other(code: 0, message: reason)
        }
        for name in buckets.keys.sorted() { authFailureBroadcaster.publish(BucketAuthFailure(bucket: name, failure: failure)) }
    }

    // MARK: - The socket

    /// Serves one socket: the handshake, `bind_device`, then frames in order while a side task
    /// pings the server and closes a connection whose pongs stop.
    func serve(inbound: WebSocketInboundStream, outbound: WebSocketOutboundWriter) async throws {
        let writer = SocketWriter(outbound: outbound)
        closeConnection = { await writer.close() }
        var iterator = inbound.messages(maxSize: configuration.maxMessageBytes).makeAsyncIterator()
        guard case .text(let first)? = try await iterator.next(), case .open(let handshake) = try EngineIOPacket.parse(first) else {
            throw TelepatCallError.unreachable("the socket did not open with an Engine.IO handshake")
        }
        guard let deviceID else { throw TelepatCallError.unreachable("no device id") }
        try await writer.write(TelepatSocketEvent.bindDevice(deviceID: deviceID, applicationID: configuration.appID).frame)
        let heartbeat = Heartbeat(interval: .milliseconds(handshake.pingInterval), timeout: .milliseconds(handshake.pingTimeout))
        let logger = logger
        let pinger = Task {
            while !Task.isCancelled {
                try await Task.sleep(for: heartbeat.interval)
                if heartbeat.isDead() {
                    logger.warning("telepat: pings unanswered; reconnecting")
                    await writer.close()
                    return
                }
                try? await writer.write(EngineIOPacket.ping("").render())
            }
        }
        let renewal = Task { await self.renewTokenWhileConnected() }
        defer {
            pinger.cancel()
            renewal.cancel()
        }
        while let message = try await iterator.next() {
            guard case .text(let text) = message else { continue }
            heartbeat.heard()
            await receive(text, writer: writer)
        }
    }

    func receive(_ text: String, writer: SocketWriter) async {
        let packet: EngineIOPacket
        do { packet = try EngineIOPacket.parse(text) } catch {
            logger.warning("telepat: a frame that is not Engine.IO: \(error)")
            return
        }
        switch packet {
        case .ping(let data):
            try? await writer.write(EngineIOPacket.pong(data).render())
        case .close:
            await writer.close()
        case .message(let data):
            guard let socketPacket = try? SocketIOPacket.parse(data), socketPacket.kind == .event else { return }
            do {
                switch try TelepatSocketEvent(packet: socketPacket) {
                case .ready: await becameReady()
                case .message(let notification): apply(notification)
                case .other(name: "error", let arguments) where arguments.first?["code"] == "025":
                    // The server does not know this device (it forgot its registrations): register
                    // again on the next connection, as Telepat's SDK does.
                    forgetDevice()
                    await writer.close()
                case .bindDevice, .other: break
                }
            } catch {
                logger.warning("telepat: an event that cannot be read: \(error)")
            }
        case .open, .pong, .upgrade, .noop:
            break
        }
    }

    /// The server refused the device id: the next `prepare()` registers a new one.
    func forgetDevice() {
        logger.warning("telepat: the server does not know device \(deviceID ?? "?"); registering again")
        deviceID = nil
        do { try store.setEngineSetting(Self.deviceSetting, to: "") } catch {
            logger.error("telepat: cannot forget the device id: \(error)")
        }
    }

    /// Bound: subscribe every model (its current objects reconcile the store), then send what is owed.
    func becameReady() async {
        connected = true
        stateBroadcaster.publish(.connected)
        logger.info("telepat: connected as device \(deviceID ?? "?")")
        for bucket in buckets.values.sorted(by: { $0.name < $1.name }) { await subscribe(bucket) }
        await flush()
    }

    func subscribe(_ bucket: TelepatBucket) async {
        guard let context = contextIDs[bucket.contextName] else {
            logger.error("telepat: the application has no context \(bucket.contextName) (bucket \(bucket.name))")
            authFailureBroadcaster.publish(BucketAuthFailure(
                bucket: bucket.name, failure: .other(code: 404, message: "no context named \(bucket.contextName)")))
            return
        }
        do {
            let request = SubscribeRequest(channel: TelepatChannel(context: context, model: bucket.model))
            let answer = try await authorized { http, device, token in
                try await http.call("/object/subscribe", body: request.json, device: device, token: token)
            }
            let objects: [JSONObject] = (answer.arrayValue ?? []).compactMap { $0.objectValue }
            try adoptCreates(among: objects, bucket: bucket.name)
            try mirror.reconcile(objects: objects, bucket: bucket.name)
            subscribed.insert(bucket.name)
            progressBroadcaster.publish(SyncProgress(
                bucket: bucket.name, entitiesDone: objects.count, entitiesKnown: objects.count, bytesReceived: 0, isReady: true))
        } catch {
            logger.error("telepat: cannot subscribe to \(bucket.name): \(error)")
        }
    }

    /// Notifications, applied to the store at once (the file system hears of them from it).
    func apply(_ notification: TelepatNotification) {
        do {
            for entry in notification.new {
                guard let object = entry.object, let bucket = bucket(of: object, entry: entry) else { continue }
                if let index = pendingCreates[bucket]?.firstIndex(where: { TelepatSave.created(object, matches: $0.content) }),
                    let pending = pendingCreates[bucket]?.remove(at: index)
                {
                    try mirror.adopt(created: pending.change, object: object)
                } else {
                    try mirror.apply(object: object, bucket: bucket)
                }
            }
            for entry in notification.updated {
                guard let patch = entry.patch, let bucket = bucket(ofPatch: patch, entry: entry) else { continue }
                try mirror.apply(patch: patch, bucket: bucket)
            }
            for entry in notification.deleted {
                guard let object = entry.object, let id = object["id"]?.stringValue, let bucket = bucket(of: object, entry: entry) else { continue }
                try mirror.remove(key: id, bucket: bucket)
            }
        } catch {
            logger.error("telepat: a notification could not be stored: \(error)")
        }
    }

    /// The subscribed bucket of an object (its context and type), or of the entry's subscription.
    func bucket(of object: JSONObject, entry: TelepatNotification.Entry) -> String? {
        if let context = object["context_id"]?.stringValue, let model = object["type"]?.stringValue,
            let found = subscribedBucket(contextID: context, model: model)
        {
            return found
        }
        return entry.subscriptions.lazy.compactMap { self.bucket(ofSubscription: $0) }.first
    }

    func bucket(ofPatch patch: TelepatPatch, entry: TelepatNotification.Entry) -> String? {
        if let found = entry.subscriptions.lazy.compactMap({ self.bucket(ofSubscription: $0) }).first { return found }
        // No subscription named: the subscribed bucket of that model that holds the object.
        return subscribed.sorted().first { name in
            buckets[name]?.model == patch.path.model && (try? store.entity(bucket: name, key: patch.path.id)) != nil
        }
    }

    /// `blg:<app>:context:<context id>:<model>`.
    func bucket(ofSubscription key: String) -> String? {
        let parts = key.split(separator: ":").map(String.init)
        guard let index = parts.firstIndex(of: "context"), index + 2 < parts.count else { return nil }
        return subscribedBucket(contextID: parts[index + 1], model: parts[index + 2])
    }

    func subscribedBucket(contextID: String, model: String) -> String? {
        subscribed.sorted().first { name in
            guard let bucket = buckets[name] else { return false }
            return bucket.model == model && contextIDs[bucket.contextName] == contextID
        }
    }

    /// Creates sent before (this connection or a mount before it) whose object is among `objects`
    /// take their place, so a create is never sent twice.
    func adoptCreates(among objects: [JSONObject], bucket: String) throws {
        var remaining = objects.filter { object in
            guard let id = object["id"]?.stringValue else { return false }
            return (try? store.entity(bucket: bucket, key: id)) == nil
        }
        var stillPending: [PendingCreate] = []
        var sent = pendingCreates[bucket] ?? []
        for change in try store.outgoingChanges(bucket: bucket) where change.sourceVersion == nil && change.state == .sent {
            guard !sent.contains(where: { $0.change.ccid == change.ccid }), let value = try store.entity(bucket: bucket, key: change.key)?.value
            else { continue }
            sent.append(PendingCreate(change: change, content: value))
        }
        for pending in sent {
            if let index = remaining.firstIndex(where: { TelepatSave.created($0, matches: pending.content) }) {
                try mirror.adopt(created: pending.change, object: remaining.remove(at: index))
            } else {
                stillPending.append(pending)
            }
        }
        pendingCreates[bucket] = stillPending
    }

    /// Returns whether the connection had become ready.
    func connectionEnded() -> Bool {
        let wasReady = connected
        connected = false
        subscribed.removeAll()
        closeConnection = nil
        return wasReady
    }

    func sleepUnlessWoken(_ delay: Duration) async {
        let sleeper = Task { try? await Task.sleep(for: delay); self.wake() }
        await withCheckedContinuation { continuation in
            if !running { continuation.resume() } else { wakeUp = continuation }
        }
        sleeper.cancel()
    }
}

/// Writes frames on the socket; a failed write closes it.
struct SocketWriter: Sendable {
    let outbound: WebSocketOutboundWriter

    func write(_ text: String) async throws {
        try await outbound.write(.text(text))
    }

    func close() async {
        try? await outbound.close(.normalClosure, reason: nil)
    }
}

/// Engine.IO 3's heartbeat: the client pings every interval; the connection is dead when
/// nothing was heard for an interval plus the timeout.
final class Heartbeat: Sendable {
    let interval: Duration
    let timeout: Duration
    private let lastHeard: Mutex<ContinuousClock.Instant>

    init(interval: Duration, timeout: Duration) {
        self.interval = interval
        self.timeout = timeout
        lastHeard = Mutex(.now)
    }

    func heard() { lastHeard.withLock { $0 = .now } }

    func isDead() -> Bool { lastHeard.withLock { ContinuousClock.now - $0 > interval + timeout } }
}
