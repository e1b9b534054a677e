import Foundation
import HTTPTypes
import Hummingbird
import JSONDiff
import Logging
import TelepatProtocol

/// The long-polling transport of the Telepat socket (Engine.IO 3), which socket.io-client 1.x,
/// and so Telepat's JS SDK, starts with before it upgrades to a WebSocket:
///
/// - `GET /socket.io/?EIO=3&transport=polling` (no `sid`): a new session; the answer carries
///   the handshake (offering the `websocket` upgrade) and the Socket.IO connect.
/// - `GET ...&sid=<sid>`: the session's packets for the client, waiting for the first one; a
///   poll left waiting is answered with a noop before the HTTP request deadline would cut it
///   (the client polls again at once).
/// - `POST ...&sid=<sid>`: the client's packets, to the same handler a WebSocket's go to.
///
/// Bodies are framed as `b64=1` asks (text) or, without it, in the binary framing
/// (`EngineIOPayload`). Errors are engine.io's: 400 with `{"code", "message"}`.
struct TelepatPolling: Sendable {
    let frontEnd: TelepatFrontEnd
    let sessions: TelepatSessions
    let pingInterval: Duration
    let pingTimeout: Duration
    /// How long a poll waits for a packet before it is answered with a noop.
    let longPoll: Duration

    func register(on router: Router<ServerRequestContext>) {
        router.get("/socket.io") { request, _ in await poll(request) }
        router.post("/socket.io") { request, _ in await receive(request) }
    }

    /// engine.io's error codes (`Server.errorMessages`).
    private enum Refusal: Int, Error {
        case unknownTransport = 0, unknownSession, badHandshakeMethod, badRequest, forbidden, unsupportedProtocolVersion

        var message: String {
            switch self {
            case .unknownTransport: return "Transport unknown"
            case .unknownSession: return "Session ID unknown"
            case .badHandshakeMethod: return "Bad handshake method"
            case .badRequest: return "Bad request"
            case .forbidden: return "Forbidden"
            case .unsupportedProtocolVersion: return "Unsupported protocol version"
            }
        }
    }

    private struct Query {
        var sid: String?
        var framing: EngineIOPayload.Framing
    }

    private func query(_ request: Request) throws(Refusal) -> Query {
        let parameters = request.uri.queryParameters
        guard parameters.get("EIO") == "3" else { throw .unsupportedProtocolVersion }
        guard parameters.get("transport") == "polling" else { throw .unknownTransport }
        // JSONP polling (`j=`) is not served: the SDK polls with XHR.
        guard parameters.get("j") == nil else { throw .badRequest }
        let b64 = parameters.get("b64").map { !$0.isEmpty && $0 != "0" && $0 != "false" } ?? false
        return Query(sid: parameters.get("sid").map { String($0) }, framing: b64 ? .text : .binary)
    }

    private func poll(_ request: Request) async -> Response {
        do {
            let query = try query(request)
            guard let sid = query.sid else {
                guard let session = sessions.open(transport: .polling, frontEnd: frontEnd) else { throw Refusal.forbidden }
                session.open(upgrades: ["websocket"], pingInterval: pingInterval, pingTimeout: pingTimeout)
                let packets = session.outbox.takeQueued(limit: TelepatSession.maxPacketsPerPoll)
                return payload(packets, framing: query.framing, request: request)
            }
            guard let session = sessions.session(sid) else { throw Refusal.unknownSession }
            let packets: [String]
            do {
                packets = try await session.poll(wait: longPoll) ?? [EngineIOPacket.close.render()]
            } catch {
                // A second poll while one waits, or a poll of a session that upgraded.
                throw Refusal.badRequest
            }
            return payload(packets, framing: query.framing, request: request)
        } catch let refusal as Refusal {
            return answer(refusal, request: request)
        } catch {
            return answer(.badRequest, request: request)
        }
    }

    private func receive(_ request: Request) async -> Response {
        do {
            let query = try query(request)
            guard let sid = query.sid else { throw Refusal.badHandshakeMethod }
            guard let session = sessions.session(sid) else { throw Refusal.unknownSession }
            guard session.transport == .polling || session.transport == .probing else { throw Refusal.badRequest }
            let body: ByteBuffer
            do {
                body = try await request.body.collect(upTo: frontEnd.configuration.maxFrameSize)
            } catch {
                throw Refusal.badRequest
            }
            let packets: [EngineIOPacket]
            do {
                packets = try EngineIOPayload.parse(Array(body.readableBytesView)).map { text throws(TelepatProtocolError) in
                    try EngineIOPacket.parse(text)
                }
            } catch {
                // As engine.io does on a parse error: the session ends.
                frontEnd.logger.info("closing a Telepat session after a malformed payload", metadata: ["error": "\(error)"])
                session.close()
                throw Refusal.badRequest
            }
            session.heard()
            for packet in packets { session.receive(packet) }
            var headers = corsHeaders(request)
            headers[.contentType] = "text/html"
            return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(string: "ok")))
        } catch let refusal as Refusal {
            return answer(refusal, request: request)
        } catch {
            return answer(.badRequest, request: request)
        }
    }

    private func payload(_ packets: [String], framing: EngineIOPayload.Framing, request: Request) -> Response {
        var headers = corsHeaders(request)
        headers[.contentType] = framing == .text ? "text/plain; charset=UTF-8" : "application/octet-stream"
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: EngineIOPayload.render(packets, framing: framing))))
    }

    private func answer(_ refusal: Refusal, request: Request) -> Response {
        var headers = corsHeaders(request)
        headers[.contentType] = "application/json"
        let body = JSONValue.object(["code": .integer(Int64(refusal.rawValue)), "message": .string(refusal.message)]).compactRendered()
        return Response(status: .badRequest, headers: headers, body: .init(byteBuffer: ByteBuffer(string: body)))
    }

    /// As engine.io answers polls: a browser SDK on another origin may read them.
    private func corsHeaders(_ request: Request) -> HTTPFields {
        var headers = HTTPFields()
        if let origin = request.headers[.origin] {
            headers[.accessControlAllowOrigin] = origin
            headers[.accessControlAllowCredentials] = "true"
        } else {
            headers[.accessControlAllowOrigin] = "*"
        }
        return headers
    }
}
