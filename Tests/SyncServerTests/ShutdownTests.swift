import Foundation
import Hummingbird
import Logging
import NIOConcurrencyHelpers
import ServiceLifecycle
@testable import SyncServer
import Testing

/// Issue 20: SIGTERM never finished while an idle or stuck peer was connected. A graceful
/// shutdown (what SIGTERM and SIGINT start in `bucketfs serve`) ends within a bound.
@Suite(.timeLimit(.minutes(2)))
struct ShutdownTests {
    @Test func gracefulShutdownEndsWithStuckAndIdlePeersConnected() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let store = try ServerStore(directory: directory.path, passwordIterations: testPasswordIterations)
        let boundPort = NIOLockedValueBox<Int?>(nil)
        var configuration = ServerConfiguration(host: "127.0.0.1", port: 0)
        configuration.shutdownGrace = .milliseconds(500)
        configuration.onServerRunning = { port in boundPort.withLockedValue { $0 = port } }
        var logger = Logger(label: "test-server")
        logger.logLevel = .warning
        let app = try buildServerApplication(configuration: configuration, store: store, logger: logger)
        let group = ServiceGroup(configuration: .init(services: [app], logger: logger))
        let running = Task { try await group.run() }
        let start = ContinuousClock.now
        while boundPort.withLockedValue({ $0 }) == nil, ContinuousClock.now - start < hangGuard {
            try await Task.sleep(for: .milliseconds(10))
        }
        let port = try #require(boundPort.withLockedValue { $0 })

        let token = try await store.createUser(username: "alice@example.com", password: "secret").accessToken
        let path = "/sock/1/test-app/websocket"
        // Stuck: authorised, its window full of broadcasts it never reads.
        let stuck = try await RawWebSocket.open(port: port, path: path, receiveBufferBytes: 2048)
        try stuck.sendText(#"0:init:{"clientid":"stuck","token":"\#(token)","name":"notes"}"#)
        // Idle: upgraded, never answers (not even the close handshake).
        let idle = try await RawWebSocket.open(port: port, path: path)
        // Idle below HTTP.
        let tcp = try await RawTCP.open(port: port)
        let writer = try await TestSocket.connect(port: port, appID: "test-app")
        _ = try await writer.authorize(token: token, clientID: "writer")
        let blob = String(repeating: "s", count: 1_000_000)
        for index in 0..<6 { try await create(writer, key: "k\(index)", object: ["blob": .string(blob)]) }

        let shutdownStart = ContinuousClock.now
        await group.triggerGracefulShutdown()
        try await running.value
        // The grace period (0.5 s) plus the hard close; the library's own close handshake
        // alone waits 15 s for a peer that does not answer.
        #expect(ContinuousClock.now - shutdownStart < .seconds(10))
        withExtendedLifetime((stuck, idle, tcp)) {}
        await writer.close()
    }
}
