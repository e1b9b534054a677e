import Glibc
import Foundation
import JSONDiff
import Logging
import PostgresTestSupport
@testable import SyncServer
import SyncStore
import Testing
@testable import SyncClient
import SyncEngine

/// A client given two servers, two nodes on one PostgreSQL database: when the one it is on
/// stops, it goes on at the other, resumes from its stored change versions and loses nothing.
@Suite(.timeLimit(.minutes(4)))
struct FailoverTests {
    @Test func aClientWhoseServerStopsMovesToTheNextAndLosesNothing() async throws {
        try await withPostgresDatabase { cluster, database in
            let location = try cluster.location(database: database)
            let nodeA = try await ClusterNode.start(location)
            let nodeB: ClusterNode
            do { nodeB = try await ClusterNode.start(location) } catch {
                await nodeA.stop()
                throw error
            }
            let directory = try TemporaryDirectory()
            var clients: [TestClient] = []
            let outcome: Result<Void, any Error>
            do {
                let token = try await nodeA.store.createUser(username: "alice@example.com", password: "secret").accessToken
                let mover = try Self.client("mover", servers: [nodeA.url, nodeB.url], token: token, directory: directory)
                clients.append(mover)
                let watcher = try Self.client("watcher", servers: [nodeB.url], token: token, directory: directory)
                clients.append(watcher)
                await mover.client.start()
                await watcher.client.start()

                for index in 0..<10 {
                    _ = try await mover.client.save(bucket: "notes", key: "n\(index)", value: ["text": .string("first \(index)")])
                }
                try await mover.idle()
                #expect(mover.client.currentServer == ServerInUse(url: nodeA.url, position: 1, count: 2))

                // Node A stops; saves go on while the client finds node B.
                await nodeA.stop()
                for index in 0..<20 {
                    _ = try await mover.client.save(bucket: "notes", key: "n\(index)", value: ["text": .string("second \(index)")])
                }
                try await mover.idle()
                #expect(mover.client.currentServer == ServerInUse(url: nodeB.url, position: 2, count: 2))
                #expect(mover.client.connectionState == .connected)

                // Everything the mover saved reached the database: the watcher on node B has it,
                // each note at version 2 (saved twice) or 1 (saved once), none applied twice.
                let arrived = try await eventually {
                    try (0..<20).allSatisfy { index in
                        try watcher.value("n\(index)") == ["text": .string("second \(index)")]
                    }
                }
                #expect(arrived)
                for index in 0..<20 {
                    let stored = try #require(try watcher.store.entity(bucket: "notes", key: "n\(index)"))
                    #expect(stored.version == (index < 10 ? 2 : 1), "n\(index)")
                    #expect(try mover.store.entity(bucket: "notes", key: "n\(index)")?.state == .synced)
                }
                outcome = .success(())
            } catch {
                outcome = .failure(error)
            }
            for client in clients { await client.shutdown() }
            await nodeA.stop()
            await nodeB.stop()
            directory.remove()
            try outcome.get()
        }
    }

    /// Two servers that refuse connections: each round tries both at once, one after the other,
    /// and only then waits (offline) before the next round.
    @Test func theClientWaitsAfterARoundOfServersNotAfterEachOne() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let refusing = ["ws://127.0.0.1:1", "ws://127.0.0.1:2"]
        let client = try Self.client("rounds", servers: refusing, token: "unused", directory: directory)
        let seen = await Self.firstStates(6, of: client) { _ in "wait" }
        #expect(seen == ["try 1", "try 2", "wait", "try 3", "try 4", "wait"])
    }

    /// A server that takes the connection but never answers the WebSocket upgrade (a stopped
    /// or hung process: the kernel accepts for it): the attempt is given up after
    /// `openingTimeout` and the next one made, instead of waiting for ever.
    @Test func aServerThatNeverAnswersTheUpgradeIsGivenUpAndTriedAgain() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #expect(listener >= 0)
        defer { close(listener) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, length) == 0 && getsockname(listener, $0, &length) == 0 }
        }
        #expect(bound && listen(listener, 16) == 0)
        let port = Int(UInt16(bigEndian: address.sin_port))
        let client = try Self.client("silent", servers: ["ws://127.0.0.1:\(port)"], token: "unused", directory: directory) { configuration in
            configuration.openingTimeout = .milliseconds(500)
        }
        let seen = await Self.firstStates(4, of: client) { reason in reason.contains("did not open") ? "gave up" : "wait: \(reason)" }
        #expect(seen == ["try 1", "gave up", "try 2", "gave up"])
    }

    /// Starts the client and names its first `count` connection states (`try N` for an attempt,
    /// `offline` named from its reason), then shuts it down; nil if they did not come in 120 s.
    static func firstStates(_ count: Int, of client: TestClient, offline: @escaping @Sendable (String) -> String) async -> [String]? {
        let states = client.client.connectionStates()
        await client.client.start()
        let seen = try? await withTimeout(.seconds(120)) { () async -> [String] in
            var seen: [String] = []
            for await state in states {
                switch state {
                case .connecting(let attempt): seen.append("try \(attempt)")
                case .offline(_, _, let reason): seen.append(offline(reason))
                case .connected, .stopped: continue
                }
                if seen.count == count { break }
            }
            return seen
        }
        await client.shutdown()
        return seen
    }

    /// A client of the given servers with the harness's short delays (`TestClient.make`'s).
    static func client(
        _ name: String, servers: [String], token: String, directory: TemporaryDirectory,
        adjust: (inout SyncClientConfiguration) -> Void = { _ in }
    ) throws -> TestClient {
        let store = try SyncStore(path: directory.file("\(name).sqlite"))
        var configuration = SyncClientConfiguration(
            servers: servers, appID: "test-app", buckets: ["notes"], clientID: "bucketfs-\(name)", token: { token })
        configuration.initialBackoff = .milliseconds(50)
        configuration.maximumBackoff = .milliseconds(400)
        configuration.heartbeatInterval = .seconds(2)
        configuration.heartbeatTimeout = .seconds(2)
        adjust(&configuration)
        var logger = Logger(label: "client-\(name)")
        logger.logLevel = ProcessInfo.processInfo.environment["SYNC_TRACE"] != nil ? .trace : .critical
        return TestClient(name: name, client: try SyncClient(configuration: configuration, store: store, logger: logger), store: store)
    }
}

/// A server node in this process over a store of its own on a shared PostgreSQL database (a
/// node of a cluster); `stop()` closes its listener, its connections and its store.
final class ClusterNode: Sendable {
    let store: PostgresServerStore
    let port: Int
    private let task: Task<Void, any Error>

    private init(store: PostgresServerStore, port: Int, task: Task<Void, any Error>) {
        self.store = store
        self.port = port
        self.task = task
    }

    var url: String { "ws://127.0.0.1:\(port)" }

    static func start(_ location: PostgresLocation) async throws -> ClusterNode {
        var logger = Logger(label: "test-node")
        logger.logLevel = .critical
        let store = try await PostgresServerStore.open(location, passwordIterations: 1_000, logger: logger)
        let (ports, portContinuation) = AsyncStream<Int>.makeStream()
        var configuration = ServerConfiguration(host: "127.0.0.1", port: 0)
        configuration.onServerRunning = { port in portContinuation.yield(port); portContinuation.finish() }
        let task: Task<Void, any Error>
        do {
            let app = try buildServerApplication(configuration: configuration, storage: store, logger: logger)
            task = Task { try await app.run() }
        } catch {
            store.close()
            throw error
        }
        let port = try? await withTimeout(.seconds(30)) { () async -> Int? in
            for await port in ports { return port }
            return nil
        }
        guard let port else {
            task.cancel()
            _ = try? await task.value
            store.close()
            throw TestFailure("a cluster node did not start")
        }
        return ClusterNode(store: store, port: port, task: task)
    }

    /// Idempotent.
    func stop() async {
        task.cancel()
        _ = try? await task.value
        store.close()
    }
}
