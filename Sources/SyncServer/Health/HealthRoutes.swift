import HTTPTypes
import Hummingbird
import JSONDiff
import NIOConcurrencyHelpers

/// `/healthz` and `/readyz` (issue 38), on the main port and without auth, for a load balancer
/// and an orchestrator:
/// - `GET /healthz`: the process answers (200, `{"status":"ok"}`), whatever its store does;
///   with `"version"` too when the configuration names the build (issue 41).
/// - `GET /readyz`: 200 only when the store answers a cheap read within `readinessBound`;
///   503 while it does not (PostgreSQL stopped or unreachable) and once a graceful shutdown has
///   begun, so a balancer (examples/haproxy.cfg) stops sending this node new clients.
struct HealthRoutes: Sendable {
    /// How long the store may take to answer the readiness read.
    static let readinessBound: Duration = .seconds(2)

    let store: any ServerStorage
    let shutdown: ShutdownState
    let statistics: ServerStatistics
    /// `ServerConfiguration.software`.
    let software: String?

    func register(on router: Router<ServerRequestContext>) {
        var healthy: JSONObject = ["status": .string("ok")]
        if let software { healthy["version"] = .string(software) }
        router.get("/healthz") { [healthy] _, _ in
            Self.json(.ok, healthy)
        }
        router.get("/readyz") { _, _ in
            await ready()
        }
    }

    private func ready() async -> Response {
        if shutdown.hasBegun { return Self.json(.serviceUnavailable, ["status": .string("shutting down")]) }
        let store = self.store
        let answered = await answersWithin(Self.readinessBound) { try await store.checkReadable() }
        switch answered {
        case .success: return Self.json(.ok, ["status": .string("ready")])
        case .failure(let reason):
            statistics.databaseUnavailable(operation: "readiness")
            return Self.json(.serviceUnavailable, ["status": .string("store unavailable"), "reason": .string(reason)])
        }
    }

    private static func json(_ status: HTTPResponse.Status, _ fields: JSONObject) -> Response {
        var response = Response(
            status: status,
            headers: [.contentType: "application/json", .cacheControl: "no-store"],
            body: .init(byteBuffer: ByteBuffer(string: JSONValue.object(fields).compactRendered() + "\n")))
        if status != .ok { response.headers[.retryAfter] = "1" }
        return response
    }
}

enum ProbeOutcome: Sendable {
    case success
    case failure(String)
}

/// Runs `probe` and waits for it `bound` at most. The probe runs in a task of its own, not a
/// child: a task group would wait for a probe stuck on a database that never answers.
func answersWithin(_ bound: Duration, _ probe: @escaping @Sendable () async throws -> Void) async -> ProbeOutcome {
    let once = NIOLockedValueBox<CheckedContinuation<ProbeOutcome, Never>?>(nil)
    @Sendable func finish(_ outcome: ProbeOutcome) {
        let continuation = once.withLockedValue { slot in
            defer { slot = nil }
            return slot
        }
        continuation?.resume(returning: outcome)
    }
    return await withCheckedContinuation { continuation in
        once.withLockedValue { $0 = continuation }
        let work = Task {
            do {
                try await probe()
                finish(.success)
            } catch {
                finish(.failure("\(error)"))
            }
        }
        Task {
            try? await Task.sleep(for: bound)
            finish(.failure("no answer within \(bound)"))
            work.cancel()
        }
    }
}

/// Whether the server's graceful shutdown (SIGTERM, SIGINT) has begun; set by the first
/// connection told of it (`GuardedChildChannel`): the listener is closed by then, so only
/// requests on connections already open can still ask.
final class ShutdownState: Sendable {
    private let begun = NIOLockedValueBox(false)

    var hasBegun: Bool { begun.withLockedValue { $0 } }

    func begin() { begun.withLockedValue { $0 = true } }
}
