import Foundation
import Hummingbird
import HummingbirdWebSocket
import Logging
import SyncStore
import Testing
@testable import SyncClient

/// A peer that completes the WebSocket handshake and then never answers anything: only the
/// heartbeat can tell the connection is dead (spec "Heartbeat": expect an immediate response).
@Suite("dead connection detection", .timeLimit(.minutes(1)))
struct DeadConnectionTests {
    @Test func unansweredHeartbeatClosesAndReconnects() async throws {
        let router = Router(context: BasicWebSocketRequestContext.self)
        router.ws("/sock/1/:app/websocket") { inbound, _, _ in
            for try await _ in inbound {}
        }
        let (portStream, portContinuation) = AsyncStream<Int>.makeStream()
        var logger = Logger(label: "silent-peer")
        logger.logLevel = .critical
        let app = Application(
            router: Router(),
            server: .http1WebSocketUpgrade(webSocketRouter: router),
            configuration: .init(address: .hostname("127.0.0.1", port: 0)),
            onServerRunning: { channel in
                portContinuation.yield(channel.localAddress?.port ?? 0)
                portContinuation.finish()
            },
            logger: logger)
        let serverTask = Task { try await app.run() }
        defer { serverTask.cancel() }
        let port = try await withTimeout(.seconds(60)) { () async -> Int in
            for await port in portStream { return port }
            return 0
        }
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let store = try SyncStore(path: directory.file("dead.sqlite"))
        defer { try? store.close() }
        var configuration = SyncClientConfiguration(
            serverURL: "ws://127.0.0.1:\(port)", appID: "app", buckets: ["notes"], clientID: "dead-test",
            token: { String(repeating: "t", count: 32) })
        configuration.heartbeatInterval = .milliseconds(200)
        configuration.heartbeatTimeout = .milliseconds(200)
        configuration.initialBackoff = .milliseconds(50)
        configuration.maximumBackoff = .milliseconds(100)
        logger.logLevel = .critical
        let client = try SyncClient(configuration: configuration, store: store, logger: logger)
        let states = client.connectionStates()
        await client.start()
        var connectedCount = 0
        var sawOffline = false
        for await state in states {
            if state == .connected { connectedCount += 1 }
            if case .offline = state { sawOffline = true }
            if connectedCount >= 2 && sawOffline { break }
        }
        #expect(connectedCount >= 2)
        #expect(sawOffline)
        // Saves keep working while the peer is useless.
        let saved = try await client.save(bucket: "notes", key: "k", value: ["v": 1])
        #expect(saved.entity.state == .pending)
        await client.stop()
    }
}
