import Foundation
import HTTPTypes
import Hummingbird
import JSONDiff
import Logging

/// The auth API (DESIGN "Protocol facts"): `POST /1/{app_id}/create/` and `/1/{app_id}/authorize/`
/// with `X-Simperium-API-Key` and a JSON body `{"username","password"}`, answering
/// `{"username","access_token","userid"}`, or a plain-text error with a matching status.
struct AuthRoutes: Sendable {
    static let apiKeyHeader = HTTPField.Name("X-Simperium-API-Key")!

    let configuration: ServerConfiguration
    let store: any ServerAccounts
    let logger: Logger
    let throttle: LoginThrottle

    func register(on router: Router<ServerRequestContext>) {
        // Hummingbird ignores a trailing slash, so `/create/` (the reference form) matches too.
        router.post("/1/:app_id/create") { request, context in
            await respond(request, context, action: .create)
        }
        router.post("/1/:app_id/authorize") { request, context in
            await respond(request, context, action: .authorize)
        }
    }

    private enum Action { case create, authorize }

    /// A refusal with its status and plain-text message.
    private struct Refusal: Error {
        var status: HTTPResponse.Status
        var message: String
        var retryAfter: Duration?
    }

    private func respond(_ request: Request, _ context: ServerRequestContext, action: Action) async -> Response {
        do {
            let credentials = try await perform(request, context, action: action)
            let body = JSONValue.object([
                "username": .string(credentials.username),
                "access_token": .string(credentials.accessToken),
                "userid": .string(credentials.userID),
            ]).compactRendered()
            return Response(
                status: .ok,
                headers: [.contentType: "application/json"],
                body: .init(byteBuffer: ByteBuffer(string: body))
            )
        } catch let refusal as Refusal {
            var response = Self.plainText(refusal.status, refusal.message)
            if let wait = refusal.retryAfter { response.headers[.retryAfter] = LoginThrottle.retryAfterValue(wait) }
            return response
        } catch {
            logger.error("auth API failure", metadata: ["error": "\(error)"])
            return Self.plainText(.internalServerError, "Internal server error")
        }
    }

    private func perform(_ request: Request, _ context: ServerRequestContext, action: Action) async throws -> UserCredentials {
        let appID = context.parameters.get("app_id") ?? ""
        guard configuration.accepts(appID: appID) else { throw Refusal(status: .notFound, message: "Unknown app id") }
        let apiKey = request.headers[Self.apiKeyHeader] ?? ""
        guard configuration.apiKeyCheck(appID, apiKey) else { throw Refusal(status: .forbidden, message: "Invalid API key") }

        // Answered at once, not after waiting for a body that may never come (issue 20).
        if let length = request.headers[.contentLength].flatMap({ Int($0) }), length > configuration.maxAuthRequestBodySize {
            throw Refusal(status: .contentTooLarge, message: "Request body too large")
        }
        let body: ByteBuffer
        do {
            body = try await request.body.collect(upTo: configuration.maxAuthRequestBodySize)
        } catch {
            throw Refusal(status: .contentTooLarge, message: "Request body too large")
        }
        guard let json = try? JSONValue(parsing: body.readableBytesView),
              case .string(let username)? = json["username"],
              case .string(let password)? = json["password"]
        else {
            throw Refusal(status: .badRequest, message: "Expected a JSON object with string fields username and password")
        }
        let address = context.channel.remoteAddress?.ipAddress
        let guessedUser = action == .authorize ? username : nil
        if let wait = throttle.admit(username: guessedUser, address: address) {
            logger.notice("login attempts throttled", metadata: ["user": "\(username)", "address": "\(address ?? "?")"])
            configuration.statistics.tooManyRequests(api: "auth")
            throw Refusal(status: .tooManyRequests, message: "Too many attempts; try again later", retryAfter: wait)
        }
        do {
            switch action {
            case .create:
                let credentials = try await store.createUser(username: username, password: password)
                logger.info("user created", metadata: ["user": "\(username)"])
                return credentials
            case .authorize:
                let credentials = try await store.authorize(username: username, password: password)
                throttle.succeeded(username: username, address: address)
                return credentials
            }
        } catch let error as SyncServerError {
            switch error {
            case .invalidUsername: throw Refusal(status: .badRequest, message: "Invalid username")
            case .invalidPassword: throw Refusal(status: .badRequest, message: "Invalid password")
            case .userExists: throw Refusal(status: .conflict, message: "User already exists")
            // One answer for both, so the API does not tell which usernames exist.
            case .unknownUser, .wrongPassword:
                throw Refusal(status: .unauthorized, message: "Invalid username or password")
            // Not the client's fault and not for ever: come back later (PostgreSQL restarting).
            case .databaseUnavailable(let reason):
                logger.warning("auth API: database unavailable", metadata: ["error": "\(reason)"])
                configuration.statistics.databaseUnavailable(operation: "auth")
                throw Refusal(status: .serviceUnavailable, message: "Database unavailable; try again later", retryAfter: .seconds(5))
            default: throw error
            }
        } catch is HashingQueue.Busy {
            configuration.statistics.tooManyRequests(api: "auth")
            throw Refusal(status: .tooManyRequests, message: "Server busy; try again later", retryAfter: .seconds(1))
        }
    }

    private static func plainText(_ status: HTTPResponse.Status, _ message: String) -> Response {
        Response(
            status: status,
            headers: [.contentType: "text/plain; charset=utf-8"],
            body: .init(byteBuffer: ByteBuffer(string: message + "\n"))
        )
    }
}
