import Foundation
import HTTPTypes
import Hummingbird
import JSONDiff
import Logging
import SyncProtocol
import TelepatProtocol

/// The Telepat 0.4 API over the server's storage: the HTTP routes of a Telepat client and the
/// Engine.IO socket (`TelepatSocket`). A Telepat write is a change through the same storage
/// path as a Simperium one (a new version, a jsondiff broadcast); every committed change of a
/// subscribed bucket, from either protocol, reaches Telepat devices as a notification.
final class TelepatFrontEnd: Sendable {
    static let appIDHeader = HTTPField.Name("X-BLGREQ-APPID")!
    static let signHeader = HTTPField.Name("X-BLGREQ-SIGN")!
    static let udidHeader = HTTPField.Name("X-BLGREQ-UDID")!
    static let emptyUDID = "TP_EMPTY_UDID"

    let settings: TelepatSettings
    let configuration: ServerConfiguration
    let store: any ServerStorage
    let hub: SubscriptionHub
    let devices: TelepatDevices
    let notifier: TelepatNotifier
    let owners: TelepatOwners
    let revocations: TelepatRevocations
    /// The auth API's: a guess counts against a user and an address whichever API it came by.
    let throttle: LoginThrottle
    let logger: Logger

    init(
        settings: TelepatSettings, configuration: ServerConfiguration, store: any ServerStorage, hub: SubscriptionHub,
        throttle: LoginThrottle, logger: Logger
    ) {
        self.settings = settings
        self.throttle = throttle
        self.configuration = configuration
        self.store = store
        self.hub = hub
        self.logger = logger
        let devices = TelepatDevices(path: settings.devicesPath, logger: logger)
        let notifier = TelepatNotifier(store: store, devices: devices, logger: logger)
        self.devices = devices
        self.notifier = notifier
        owners = TelepatOwners(store: store)
        revocations = TelepatRevocations(path: settings.revokedTokensPath, logger: logger)
        hub.observe { bucketID, change in notifier.changed(bucketID: bucketID, change: change, devices: devices) }
    }

    /// A stored entity as Telepat clients see it: the key is its id; an entity written through
    /// Simperium without Telepat's own fields gets them from its bucket.
    static func view(_ data: JSONObject, key: String, subscription: TelepatDevices.Subscription) -> JSONObject {
        var object = data
        object["id"] = .string(key)
        if object["type"] == nil { object["type"] = .string(subscription.channel.model) }
        if object["context_id"] == nil { object["context_id"] = .string(subscription.channel.context) }
        if object["application_id"] == nil { object["application_id"] = .string(subscription.applicationID) }
        return object
    }

    // MARK: Routes

    func register(on router: Router<ServerRequestContext>) {
        let routes: [(HTTPRequest.Method, String, Access, @Sendable (TelepatFrontEnd, Caller, [UInt8]) async throws -> TelepatResponse)] = [
            (.post, "/device/register", .application, { try await $0.registerDevice($1, $2) }),
            (.post, "/user/register-username", .application, { try await $0.registerUser($1, $2) }),
            // telepat-api routes both spellings to one handler; the SDK's `login` uses the second.
            (.post, "/user/login-password", .application, { try await $0.login($1, $2) }),
            (.post, "/user/login_password", .application, { try await $0.login($1, $2) }),
            (.get, "/user/refresh_token", .user, { try await $0.refresh($1, $2) }),
            (.get, "/user/me", .user, { _, caller, _ in TelepatResponse(content: caller.userJSON) }),
            // GET in telepat-api and the SDK; POST kept for clients that used it here.
            (.get, "/user/logout", .user, { $0.logout($1, $2) }),
            (.post, "/user/logout", .user, { $0.logout($1, $2) }),
            // The SDK's user data (`User.get`, and its monitor's `update`): bucketfs keeps no
            // user data beyond the account, so these answer Telepat's error shape.
            (.get, "/user/get", .user, { _, _, _ in throw TelepatErrorResponse(.notServed, "User data is not served by this server (bucketfs): use /user/me") }),
            (.post, "/user/update", .user, { _, _, _ in throw TelepatErrorResponse(.notServed, "User data is not served by this server (bucketfs)") }),
            (.post, "/context/all", .application, { try await $0.contexts($1, $2) }),
            (.get, "/context/all", .application, { try await $0.contexts($1, $2) }),
            (.post, "/object/subscribe", .user, { try await $0.subscribe($1, $2) }),
            (.post, "/object/unsubscribe", .user, { try await $0.unsubscribe($1, $2) }),
            (.post, "/object/count", .user, { try await $0.count($1, $2) }),
            (.post, "/object/create", .user, { try await $0.create($1, $2) }),
            (.post, "/object/update", .user, { try await $0.update($1, $2) }),
            (.delete, "/object/delete", .user, { try await $0.delete($1, $2) }),
            (.post, "/object/delete", .user, { try await $0.delete($1, $2) }),
        ]
        let allMethods: [HTTPRequest.Method] = [.get, .post, .put, .delete, .patch]
        for (method, path, access, handler) in routes {
            router.on(RouterPath(path), method: method) { [self] request, context in
                await self.respond(request, context, access: access, handler: handler)
            }
        }
        // A known route asked with another method (`GET /object/create`): telepat-api's express
        // router finds no route then, and answers its 404 in Telepat's error shape; Hummingbird
        // would answer a bare 404 (the wildcards below do not cover a path it knows).
        for path in Set(routes.map(\.1)) {
            let served = Set(routes.filter { $0.1 == path }.map(\.0))
            for method in allMethods where !served.contains(method) {
                router.on(RouterPath(path), method: method) { _, _ in
                    Self.answer(TelepatErrorResponse(.unknownRoute, "There is no route with this URL path and method"))
                }
            }
        }
        // Anything else under Telepat's prefixes: its error shape, not the plain-text 404.
        for prefix in ["/device", "/user", "/context", "/object"] {
            for method in allMethods {
                router.on(RouterPath(prefix + "/**"), method: method) { _, _ in
                    Self.answer(TelepatErrorResponse(.unknownRoute, "Unknown route"))
                }
            }
        }
    }

    enum Access { case application, user }

    /// Who called: the application (sign and id checked), the device header, and for user
    /// routes the logged-in user.
    struct Caller: Sendable {
        var application: TelepatSettings.Application
        var device: String?
        /// The peer's IP address (the login throttle's key).
        var address: String?
        var token: TelepatToken?
        /// The JWT as sent (for a logout to revoke).
        var jwt: String?

        var user: AuthenticatedUser? { token.map { AuthenticatedUser(id: $0.userID, username: $0.username) } }

        var userJSON: JSONValue {
            guard let token else { return .null }
            return .object(["id": .string(token.publicID), "username": .string(token.username)])
        }
    }

    private func respond(
        _ request: Request, _ context: ServerRequestContext, access: Access,
        handler: @Sendable (TelepatFrontEnd, Caller, [UInt8]) async throws -> TelepatResponse
    ) async -> Response {
        do {
            var caller = try authenticate(request, access: access)
            caller.address = context.channel.remoteAddress?.ipAddress
            if let length = request.headers[.contentLength].flatMap({ Int($0) }), length > configuration.maxFrameSize {
                throw TelepatErrorResponse(.objectTooLarge, "Request body too large")
            }
            let body: ByteBuffer
            do {
                body = try await request.body.collect(upTo: configuration.maxFrameSize)
            } catch {
                throw TelepatErrorResponse(.objectTooLarge, "Request body too large")
            }
            return Self.answer(try await handler(self, caller, Array(body.readableBytesView)))
        } catch let throttled as Throttled {
            var response = Self.answer(TelepatErrorResponse(.tooManyRequests, "Too many attempts; try again later"))
            response.headers[.retryAfter] = LoginThrottle.retryAfterValue(throttled.wait)
            return response
        } catch let error as TelepatErrorResponse {
            return Self.answer(error)
        } catch let error as TelepatProtocolError {
            return Self.answer(TelepatErrorResponse.malformed(error))
        } catch {
            logger.error("Telepat API failure", metadata: ["error": "\(error)"])
            return Self.answer(TelepatErrorResponse(.serverFailure, "Internal server error"))
        }
    }

    private func authenticate(_ request: Request, access: Access) throws(TelepatErrorResponse) -> Caller {
        guard let appID = request.headers[Self.appIDHeader], let application = settings.applications[appID] else {
            throw TelepatErrorResponse(.invalidApplication, "Unknown application")
        }
        guard let sign = request.headers[Self.signHeader], constantTimeEqual(Array(sign.lowercased().utf8), Array(application.sign.utf8)) else {
            throw TelepatErrorResponse(.invalidAPIKey, "Invalid API key")
        }
        var caller = Caller(application: application)
        if let udid = request.headers[Self.udidHeader], udid != Self.emptyUDID, !udid.isEmpty { caller.device = udid }
        guard access == .user else { return caller }
        guard let authorization = request.headers[.authorization] else {
            throw TelepatErrorResponse(.authorizationMissing, "Authorization header missing")
        }
        let parts = authorization.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, parts[0].lowercased() == "bearer",
              let token = TelepatToken.verify(String(parts[1]), secret: settings.jwtSecret, now: Self.now()),
              !revocations.isRevoked(String(parts[1]))
        else { throw TelepatErrorResponse(.invalidToken, "Invalid or expired token") }
        caller.token = token
        caller.jwt = String(parts[1])
        return caller
    }

    static func now() -> Int64 { Int64(Date().timeIntervalSince1970) }

    static func answer(_ response: TelepatResponse) -> Response {
        json(HTTPResponse.Status(code: response.status), response.json)
    }

    static func answer(_ error: TelepatErrorResponse) -> Response {
        json(HTTPResponse.Status(code: error.status), error.json)
    }

    private static func json(_ status: HTTPResponse.Status, _ value: JSONValue) -> Response {
        Response(status: status, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: value.compactRenderedBytes())))
    }

    // MARK: Devices and users

    private func registerDevice(_ caller: Caller, _ body: [UInt8]) async throws -> TelepatResponse {
        let registration = try DeviceRegistration(parsing: body)
        let id = devices.register(existing: caller.device, registration: registration)
        return TelepatResponse(content: .object(["identifier": .string(id)]))
    }

    /// A login or registration refused by the login throttle, to come back after `wait`.
    private struct Throttled: Error {
        let wait: Duration
    }

    /// Admits a login for `username` (nil: a registration, counted per address only) from the
    /// caller's address, or throws `Throttled`.
    private func admit(_ caller: Caller, username: String?) throws {
        guard let wait = throttle.admit(username: username, address: caller.address) else { return }
        logger.notice("login attempts throttled", metadata: ["user": "\(username ?? "-")", "address": "\(caller.address ?? "?")", "protocol": "telepat"])
        configuration.statistics.tooManyRequests(api: "telepat")
        throw Throttled(wait: wait)
    }

    private func registerUser(_ caller: Caller, _ body: [UInt8]) async throws -> TelepatResponse {
        let request = try UserCredentialsRequest(parsing: body)
        try admit(caller, username: nil)
        do {
            _ = try await store.createUser(username: request.username, password: request.password)
        } catch let error as SyncServerError {
            switch error {
            case .userExists: throw TelepatErrorResponse(.userExists, "User already exists")
            case .invalidUsername, .invalidPassword: throw TelepatErrorResponse(.invalidRequest, "Invalid username or password")
            default: throw error
            }
        }
        return TelepatResponse(status: 202, content: .string("User created"))
    }

    private func login(_ caller: Caller, _ body: [UInt8]) async throws -> TelepatResponse {
        let request = try UserCredentialsRequest(parsing: body)
        try admit(caller, username: request.username)
        let credentials: UserCredentials
        do {
            credentials = try await store.authorize(username: request.username, password: request.password)
            throttle.succeeded(username: request.username, address: caller.address)
        } catch let error as SyncServerError {
            switch error {
            case .unknownUser, .wrongPassword: throw TelepatErrorResponse(.wrongCredentials, "Invalid username or password")
            default: throw error
            }
        } catch is HashingQueue.Busy {
            configuration.statistics.tooManyRequests(api: "telepat")
            throw TelepatErrorResponse(.tooManyRequests, "Server busy; try again later")
        }
        guard let user = try await store.user(forToken: credentials.accessToken) else {
            throw TelepatErrorResponse(.serverFailure, "Login failed")
        }
        return tokenResponse(TelepatToken(username: user.username, userID: user.id, publicID: credentials.userID, expires: 0))
    }

    /// Revokes the token the call carries: refused from now on, until and after it expires.
    private func logout(_ caller: Caller, _ body: [UInt8]) -> TelepatResponse {
        if let jwt = caller.jwt, let token = caller.token { revocations.revoke(jwt, expires: token.expires) }
        return TelepatResponse(content: .string("Logged out"))
    }

    private func refresh(_ caller: Caller, _ body: [UInt8]) async throws -> TelepatResponse {
        guard let token = caller.token else { throw TelepatErrorResponse(.authorizationMissing, "Authorization header missing") }
        return tokenResponse(token)
    }

    private func tokenResponse(_ token: TelepatToken) -> TelepatResponse {
        var token = token
        let now = Self.now()
        token.expires = now + settings.tokenLifetime
        let jwt = token.signed(secret: settings.jwtSecret, issuedAt: now)
        return TelepatResponse(content: .object([
            "token": .string(jwt), "user": .object(["id": .string(token.publicID), "username": .string(token.username)]),
        ]))
    }

    private func contexts(_ caller: Caller, _ body: [UInt8]) async throws -> TelepatResponse {
        TelepatResponse(content: .array(caller.application.contexts.map { context in
            .object([
                "id": .string(context.id), "name": .string(context.name), "application_id": .string(caller.application.id),
                "type": .string("context"), "models": .array(context.models.map { .string($0) }),
            ])
        }))
    }

    // MARK: Objects

    /// The bucket of a declared context and model: the application's, in its owner's account,
    /// whichever of its users calls (every route that reads or writes objects comes here).
    private func bucket(_ caller: Caller, context: String, model: String) async throws -> BucketHandle {
        guard caller.user != nil else { throw TelepatErrorResponse(.authorizationMissing, "Authorization header missing") }
        guard let declared = caller.application.context(context) else {
            throw TelepatErrorResponse(.unknownContext, "Context not found")
        }
        guard declared.models.contains(model) else { throw TelepatErrorResponse(.unknownModel, "Model not found") }
        let owner = try await owners.userID(of: caller.application)
        return try await store.openBucket(userID: owner, name: TelepatSettings.bucketName(context: context, model: model))
    }

    /// Every live object of a channel that passes `filter`, by key.
    private func objects(_ caller: Caller, _ channel: TelepatChannel, filter: TelepatFilter?) async throws -> [JSONObject] {
        let bucket = try await bucket(caller, context: channel.context, model: channel.model)
        let subscription = TelepatDevices.Subscription(applicationID: caller.application.id, channel: channel, bucket: bucket, filter: filter, key: "")
        if let id = channel.id {
            guard let data = try await store.entity(bucket: bucket, key: id)?.data else { return [] }
            return [Self.view(data, key: id, subscription: subscription)].filter(subscription.includes)
        }
        var result: [JSONObject] = []
        var offset = 0
        var mark: String?
        repeat {
            let page = try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<IndexPage, any Error>) in
                let store = self.store
                let after = mark
                let start = offset
                let limit = configuration.maxIndexPageSize
                let maxBytes = configuration.maxIndexPageDataBytes
                Task {
                    do {
                        try await store.readIndexPage(bucket: bucket, afterKey: after, offset: start, limit: limit, includeData: true, maxDataBytes: maxBytes) {
                            continuation.resume(returning: $0)
                        }
                    } catch {
                        continuation.resume(throwing: error)
                    }
                }
            }
            for entry in page.index {
                if let data = entry.data { result.append(Self.view(data, key: entry.id, subscription: subscription)) }
            }
            offset += page.index.count
            mark = page.mark
        } while mark != nil
        return result.filter(subscription.includes)
    }

    private func subscribe(_ caller: Caller, _ body: [UInt8]) async throws -> TelepatResponse {
        let request = try SubscribeRequest(parsing: body)
        let filter = try request.filters.map { json throws(TelepatProtocolError) in try TelepatFilter(parsing: json) }
        let sort = try request.sort.map { json throws(TelepatProtocolError) in try TelepatSort(parsing: json) }
        if !request.noSubscribe {
            // Subscribed before the read: a change committed meanwhile is notified (and may be
            // in the answer too) rather than lost between the two.
            guard let device = caller.device else { throw TelepatErrorResponse(.deviceIDMissing, "Device id missing") }
            let bucket = try await bucket(caller, context: request.channel.context, model: request.channel.model)
            devices.subscribe(device: device, .init(
                applicationID: caller.application.id, channel: request.channel, bucket: bucket, filter: filter,
                key: request.subscriptionKey(applicationID: caller.application.id)
            ))
        }
        var objects = try await objects(caller, request.channel, filter: filter)
        if let sort { objects = sort.sorted(objects) }
        if let offset = request.offset { objects = Array(objects.dropFirst(offset)) }
        if let limit = request.limit { objects = Array(objects.prefix(limit)) }
        return TelepatResponse(content: .array(objects.map { .object($0) }))
    }

    private func unsubscribe(_ caller: Caller, _ body: [UInt8]) async throws -> TelepatResponse {
        let request = try ChannelRequest(parsing: body)
        guard let device = caller.device else { throw TelepatErrorResponse(.deviceIDMissing, "Device id missing") }
        // The channel named, filters included: a device's plain and filtered channels are apart.
        devices.unsubscribe(device: device, key: request.subscriptionKey(applicationID: caller.application.id))
        return TelepatResponse(content: .string("Subscription removed"))
    }

    private func count(_ caller: Caller, _ body: [UInt8]) async throws -> TelepatResponse {
        let request = try ChannelRequest(parsing: body)
        let filter = try request.filters.map { json throws(TelepatProtocolError) in try TelepatFilter(parsing: json) }
        let objects = try await objects(caller, request.channel, filter: filter)
        return TelepatResponse(content: .object(["count": .integer(Int64(objects.count))]))
    }

    private func create(_ caller: Caller, _ body: [UInt8]) async throws -> TelepatResponse {
        let request = try CreateRequest(parsing: body)
        let bucket = try await bucket(caller, context: request.context, model: request.model)
        let id = UUID().uuidString.lowercased()
        let object = TelepatObject.created(
            content: request.content, id: id, model: request.model, context: request.context,
            applicationID: caller.application.id, userID: caller.token?.publicID, now: Self.now()
        )
        try await commit(ChangeRequest(id: id, operation: .modify, diff: JSONDiffing.diff(from: [:], to: object), ccid: Self.changeID()), caller: caller, bucket: bucket)
        return TelepatResponse(status: 202, content: .string("Created"))
    }

    private func update(_ caller: Caller, _ body: [UInt8]) async throws -> TelepatResponse {
        let request = try UpdateRequest(parsing: body)
        let bucket = try await bucket(caller, context: request.context, model: request.model)
        guard let current = try await store.entity(bucket: bucket, key: request.id), let data = current.data else {
            throw TelepatErrorResponse(.objectNotFound, "Object not found")
        }
        let updated: JSONObject
        do {
            updated = try TelepatObject.applying(request.patches, to: data, model: request.model, id: request.id, now: Self.now())
        } catch {
            switch error {
            case .immutableField: throw TelepatErrorResponse(.immutableField, "\(error)")
            case .wrongTarget, .typeMismatch: throw TelepatErrorResponse(.invalidPatch, "\(error)")
            }
        }
        guard updated != data else { return TelepatResponse(status: 202, content: .string("Updated")) }
        try await commit(
            ChangeRequest(id: request.id, operation: .modify, diff: JSONDiffing.diff(from: data, to: updated), sourceVersion: current.version, ccid: Self.changeID()),
            caller: caller, bucket: bucket
        )
        return TelepatResponse(status: 202, content: .string("Updated"))
    }

    private func delete(_ caller: Caller, _ body: [UInt8]) async throws -> TelepatResponse {
        let request = try DeleteRequest(parsing: body)
        let bucket = try await bucket(caller, context: request.context, model: request.model)
        guard let current = try await store.entity(bucket: bucket, key: request.id), current.data != nil else {
            throw TelepatErrorResponse(.objectNotFound, "Object not found")
        }
        try await commit(ChangeRequest(id: request.id, operation: .remove, sourceVersion: current.version, ccid: Self.changeID()), caller: caller, bucket: bucket)
        return TelepatResponse(status: 202, content: .string("Deleted"))
    }

    private static func changeID() -> String { UUID().uuidString.lowercased() }

    /// Submits a change as a Simperium client's would be, waits for its commit, and publishes it.
    private func commit(_ change: ChangeRequest, caller: Caller, bucket: BucketHandle) async throws {
        guard (try? EntityKey.validate(change.id)) != nil else { throw TelepatErrorResponse(.invalidRequest, "Invalid object id") }
        let limits = ChangeLimits(
            maxDocumentSize: configuration.maxDocumentSize, historyPerEntity: configuration.historyPerEntity,
            changeLogRetention: configuration.changeLogRetention
        )
        let hub = self.hub
        let clientID = "telepat-" + (caller.device ?? "api")
        let submitted = ContinuousClock.now
        let verdict = try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<ChangeVerdict<StoredChange>, any Error>) in
            store.submit(change, clientID: clientID, bucket: bucket, limits: limits) { result in
                if case .success(.accepted(let stored)) = result { hub.publish(bucketID: bucket.id, change: stored) }
                continuation.resume(with: result)
            }
        }
        switch verdict {
        case .accepted: configuration.statistics.changeAccepted(via: .telepat, latency: ContinuousClock.now - submitted)
        // A change that changes nothing is answered as done (Telepat has no error for it), so
        // it is no refusal in the metrics either.
        case .refused(.emptyChange): break
        case .refused(let code): configuration.statistics.changeRefused(via: .telepat, code: code.rawValue, latency: ContinuousClock.now - submitted)
        }
        switch verdict {
        case .accepted, .refused(.emptyChange): return
        case .refused(.documentTooLarge): throw TelepatErrorResponse(.objectTooLarge, "Object too large")
        case .refused(.notFound): throw TelepatErrorResponse(.objectNotFound, "Object not found")
        case .refused(let code): throw TelepatErrorResponse(.invalidRequest, "Change refused: \(code)")
        }
    }
}
