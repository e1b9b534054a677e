import Foundation
import Hummingbird
import JSONDiff
import Logging
import Synchronization
import SyncProtocol
import SyncServer
import SyncStore
import Testing
@testable import SyncClient

/// A fresh directory under the system temp dir.
struct TemporaryDirectory: Sendable {
    let path: String

    init() throws {
        let base = FileManager.default.temporaryDirectory.appendingPathComponent("syncclient-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: base, withIntermediateDirectories: true)
        path = base.path
    }

    func file(_ name: String) -> String { path + "/" + name }

    func remove() { try? FileManager.default.removeItem(atPath: path) }
}

/// Which change error the server should force next (fault injection), per key.
final class FaultPlan: Sendable {
    private let plan = Mutex<[String: [Int]]>([:])

    /// The next `count` changes to `key` are refused with `code`.
    func fail(key: String, with code: Int, times count: Int = 1) {
        plan.withLock { $0[key, default: []].append(contentsOf: Array(repeating: code, count: count)) }
    }

    func next(for request: ChangeRequest) -> Int? {
        plan.withLock { plan in
            guard var codes = plan[request.id], !codes.isEmpty else { return nil }
            let code = codes.removeFirst()
            plan[request.id] = codes
            return code
        }
    }

    var isExhausted: Bool { plan.withLock { $0.values.allSatisfy(\.isEmpty) } }
}

/// The real sync server in-process on 127.0.0.1; restartable on the same port. Its store is a
/// SQLite file in its directory, or the PostgreSQL database at `databaseURL` (which several
/// servers, nodes of one cluster, may share).
actor TestServer {
    let directory: TemporaryDirectory
    let faults = FaultPlan()
    private(set) var port = 0
    private(set) var backend: ServerBackend?
    private var task: Task<Void, any Error>?

    private let databaseURL: String?
    private let configure: @Sendable (inout ServerConfiguration) -> Void

    init(databaseURL: String? = nil, configure: @escaping @Sendable (inout ServerConfiguration) -> Void = { _ in }) throws {
        directory = try TemporaryDirectory()
        self.databaseURL = databaseURL
        self.configure = configure
    }

    /// Starts listening (port 0 the first time, the same port after a restart).
    func start() async throws {
        var logger = Logger(label: "test-server")
        logger.logLevel = .critical
        let backend = try await ServerBackend.open(data: directory.path, databaseURL: databaseURL, passwordIterations: 1_000, logger: logger)
        self.backend = backend
        let (portStream, portContinuation) = AsyncStream<Int>.makeStream()
        let faults = self.faults
        var configuration = ServerConfiguration(host: "127.0.0.1", port: port)
        configuration.onServerRunning = { port in portContinuation.yield(port); portContinuation.finish() }
        configuration.forcedChangeError = { request in faults.next(for: request) }
        configure(&configuration)
        let app = try backend.buildApplication(configuration: configuration, logger: logger)
        task = Task { try await app.run() }
        let bound = try await withTimeout(.seconds(60)) { () async -> Int? in
            for await port in portStream { return port }
            return nil
        }
        guard let bound else { throw TestFailure("server did not start") }
        port = bound
    }

    /// Stops listening and drops every connection.
    func stop() async {
        task?.cancel()
        _ = try? await task?.value
        task = nil
        backend?.close()
        backend = nil
    }

    func makeToken(_ user: String = "alice@example.com") async throws -> String {
        guard let backend else { throw TestFailure("server not running") }
        return try await backend.accounts.createUser(username: user, password: "secret-\(user)").accessToken
    }

    var url: String { "ws://127.0.0.1:\(port)" }

    func cleanup() async {
        await stop()
        directory.remove()
    }
}

struct TestFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Runs `body` with a time bound; nil-returning bodies signal "not found".
func withTimeout<T: Sendable>(_ limit: Duration, _ body: @escaping @Sendable () async throws -> T) async throws -> T {
    try await withThrowingTaskGroup(of: T.self) { group in
        group.addTask { try await body() }
        group.addTask {
            try await Task.sleep(for: limit)
            throw TestFailure("timed out after \(limit)")
        }
        guard let first = try await group.next() else { throw TestFailure("no result") }
        group.cancelAll()
        return first
    }
}

/// One test's world: a started server, a temp directory and a user's token. `run` shuts down
/// every client made through `client(...)`, stops the server and removes the directory when the
/// body ends, whether it passed or threw.
final class SyncFixture: @unchecked Sendable {
    let server: TestServer
    let directory: TemporaryDirectory
    let token: String
    /// Touched only from the test's own task.
    private var clients: [TestClient] = []

    private init(server: TestServer, directory: TemporaryDirectory, token: String) {
        self.server = server
        self.directory = directory
        self.token = token
    }

    static func run(
        server configure: @escaping @Sendable (inout ServerConfiguration) -> Void = { _ in },
        _ body: (SyncFixture) async throws -> Void
    ) async throws {
        let server = try TestServer(configure: configure)
        try await server.start()
        let directory = try TemporaryDirectory()
        let fixture = SyncFixture(server: server, directory: directory, token: try await server.makeToken())
        let result: Result<Void, any Error>
        do { try await body(fixture); result = .success(()) } catch { result = .failure(error) }
        for client in fixture.clients { await client.shutdown() }
        await server.cleanup()
        directory.remove()
        try result.get()
    }

    /// A client on this fixture's server (the fixture's token unless one is given), with its
    /// store in the fixture's directory unless one is given.
    func client(
        _ name: String, token: String? = nil, buckets: [String] = ["notes"], storeIn storeDirectory: TemporaryDirectory? = nil,
        configure: (inout SyncClientConfiguration) -> Void = { _ in }
    ) async throws -> TestClient {
        let client = try await TestClient.make(
            name, server: server, token: token ?? self.token, directory: storeDirectory ?? directory, buckets: buckets,
            configure: configure)
        clients.append(client)
        return client
    }

    /// Clients "a" and "b" on this fixture's server, both started; with `waitUntilIdle`, each has
    /// also finished its first sync, so what a test saves next is the first change either sees.
    func startedPair(waitUntilIdle: Bool = true) async throws -> (TestClient, TestClient) {
        let a = try await client("a")
        let b = try await client("b")
        await a.client.start()
        await b.client.start()
        if waitUntilIdle {
            try await a.idle()
            try await b.idle()
        }
        return (a, b)
    }
}

extension SyncClientConfiguration {
    /// The client's own heartbeat (20 s, 10 s to answer) in place of the harness's 2 s + 2 s, for
    /// tests that count connections: only the server dropping one may end it, not a heartbeat
    /// going unanswered for 2 s in a loaded run.
    mutating func useDefaultHeartbeat() {
        let defaults = SyncClientConfiguration(serverURL: "", appID: "", buckets: [], clientID: "", token: { "" })
        heartbeatInterval = defaults.heartbeatInterval
        heartbeatTimeout = defaults.heartbeatTimeout
    }
}

/// One client: its own store file and engine.
struct TestClient: Sendable {
    let name: String
    let client: SyncClient
    let store: SyncStore

    static func make(
        _ name: String, server: TestServer, token: String, directory: TemporaryDirectory, buckets: [String] = ["notes"],
        configure: (inout SyncClientConfiguration) -> Void = { _ in }
    ) async throws -> TestClient {
        let store = try SyncStore(path: directory.file("\(name).sqlite"))
        var configuration = SyncClientConfiguration(
            serverURL: await server.url, appID: "test-app", buckets: buckets, clientID: "bucketfs-\(name)",
            token: { token })
        configuration.initialBackoff = .milliseconds(50)
        configuration.maximumBackoff = .milliseconds(400)
        configuration.heartbeatInterval = .seconds(2)
        configuration.heartbeatTimeout = .seconds(2)
        configure(&configuration)
        var logger = Logger(label: "client-\(name)")
        logger.logLevel = ProcessInfo.processInfo.environment["SYNC_TRACE"] != nil ? .trace : .critical
        let client = try SyncClient(configuration: configuration, store: store, logger: logger)
        return TestClient(name: name, client: client, store: store)
    }

    func value(_ key: String, bucket: String = "notes") throws -> JSONObject? {
        try store.entity(bucket: bucket, key: key)?.value
    }

    func idle(_ limit: Duration = .seconds(45)) async throws {
        let idle = await client.waitUntilIdle(timeout: limit)
        if !idle { throw TestFailure("\(name) not idle after \(limit): \(await client.phaseDescription(bucket: "notes") ?? "?")") }
    }

    func shutdown() async {
        await client.stop()
        try? store.close()
    }
}

/// Polls `condition` until true or the limit passes. The limit is a hang guard for loaded CI
/// machines, not a speed check (speed is measured in Benchmarks/).
func eventually(_ limit: Duration = .seconds(45), _ condition: @Sendable () async throws -> Bool) async throws -> Bool {
    let deadline = ContinuousClock.now + limit
    while ContinuousClock.now < deadline {
        if try await condition() { return true }
        try await Task.sleep(for: .milliseconds(25))
    }
    return try await condition()
}
