import Foundation
import JSONDiff
import SyncProtocol
@testable import SyncServer
import Testing

/// Issue 20: every connection has a deadline for each state it can wait in. Bounds here are
/// hang guards around configured timeouts of half a second, never speed expectations.
@Suite(.timeLimit(.minutes(2)))
struct DeadlineTests {
    private static let closeBound: Duration = .seconds(10)

    @Test func idleTrickledAndEndlessHTTPRequestsAreClosed() async throws {
        try await withServer(configure: { $0.requestTimeout = .milliseconds(500) }) { server in
            let idle = try await RawTCP.open(port: server.port)
            let slowloris = try await RawTCP.open(port: server.port)
            slowloris.send(Array("GET /1/test-app/authorize HTTP/1.1\r\nHost: x\r\n".utf8))
            let endless = try await RawTCP.open(port: server.port)
            endless.send(Array("GET / HTTP/1.1\r\nX-Long: ".utf8) + Array(repeating: UInt8(ascii: "a"), count: 60_000))
            let huge = try await RawTCP.open(port: server.port)
            huge.send(Array("GET / HTTP/1.1\r\nX-Long: ".utf8) + Array(repeating: UInt8(ascii: "a"), count: 200_000))

            #expect(await idle.readUntilClosed(within: Self.closeBound) != nil)
            #expect(await slowloris.readUntilClosed(within: Self.closeBound, trickle: Array("X-A: b\r\n".utf8)) != nil)
            #expect(await endless.readUntilClosed(within: Self.closeBound, trickle: Array("a".utf8)) != nil)
            #expect(await huge.readUntilClosed(within: Self.closeBound) != nil)
        }
    }

    @Test func aBodyThatNeverComesIsAnsweredAtOnce() async throws {
        // A long deadline: the answer must not wait for it (half of it is the hang guard).
        try await withServer(configure: { $0.requestTimeout = .seconds(120) }) { server in
            let promise = try await RawTCP.open(port: server.port)
            promise.send(Array((
                "POST /1/test-app/authorize/ HTTP/1.1\r\nHost: x\r\nX-Simperium-API-Key: k\r\n"
                    + "Content-Type: application/json\r\nContent-Length: 1000000000\r\n\r\n{\"user"
            ).utf8))
            let answer = try #require(await promise.readUntilClosed(within: .seconds(60), orContaining: "\r\n\r\n"))
            #expect(answer.hasPrefix("HTTP/1.1 413"))
        }
    }

    @Test func aWebSocketWithoutInitIsClosed() async throws {
        // Long enough for the working client's init on a loaded machine.
        try await withServer(configure: { $0.initTimeout = .seconds(3) }) { server in
            let token = try await makeUser(server)
            let silent = try await server.socket()
            let working = try await initialisedWithinAShortDeadline {
                let socket = try await server.socket()
                do {
                    _ = try await socket.authorize(token: token)
                    return socket
                } catch {
                    await socket.close()
                    throw error
                }
            }
            _ = try await silent.waitForClose(timeout: Self.closeBound)
            // An initialised connection outlives the init deadline.
            try await Task.sleep(for: .milliseconds(3100))
            #expect(try await working.request("h:1") == "h:2")
            await working.close()
            await silent.close()
        }
    }

    @Test func aPeerThatStopsReadingOnAQuietBucketIsClosed() async throws {
        let statistics = ServerStatistics()
        try await withServer(configure: {
            // Long enough that the writer (which reads) never counts as stalled on a loaded machine.
            $0.stalledWriteTimeout = .seconds(2)
            $0.statistics = statistics
        }) { server in
            let token = try await makeUser(server)
            let stuck = try await RawWebSocket.open(port: server.port, path: "/sock/1/test-app/websocket", receiveBufferBytes: 2048)
            try stuck.sendText(#"0:init:{"clientid":"stuck","token":"\#(token)","name":"notes"}"#)
            let writer = try await server.socket()
            _ = try await writer.authorize(token: token, clientID: "writer")
            // 8 MB of broadcasts: far more than the kernel buffers between the two, far less
            // than the outbound limit (16 MiB). Then the bucket is quiet.
            let blob = String(repeating: "w", count: 1_000_000)
            for index in 0..<8 { try await create(writer, key: "k\(index)", object: ["blob": .string(blob)]) }
            let deadline = ContinuousClock.now + .seconds(20)
            while statistics.openWebSockets > 1, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(50))
            }
            #expect(statistics.openWebSockets == 1)
            #expect(try await writer.request("h:1") == "h:2")
            await writer.close()
            withExtendedLifetime(stuck) {}
        }
    }

    @Test func anIdlePeerThatAnswersPingsStaysOpen() async throws {
        // Each pong may take up to an interval: 2 s did not always hold while the whole
        // in-process group loads the machine (CI, 2026-11-27); 5 s does.
        try await withServer(configure: { $0.pingInterval = .seconds(5) }) { server in
            let token = try await makeUser(server)
            let idle = try await server.socket()
            _ = try await idle.authorize(token: token)
            // Past two pings without a message: its WebSocket client answers them.
            try await Task.sleep(for: .seconds(11))
            #expect(await idle.isEnded == false)
            #expect(try await idle.request("h:1") == "h:2")
            await idle.close()
        }
    }

    @Test func aSilentPeerIsClosedAfterAPingTimeout() async throws {
        let statistics = ServerStatistics()
        try await withServer(configure: {
            $0.pingInterval = .milliseconds(300)
            $0.statistics = statistics
        }) { server in
            let token = try await makeUser(server)
            // Authorised, then it neither reads nor writes (so no pong).
            let silent = try await RawWebSocket.open(port: server.port, path: "/sock/1/test-app/websocket")
            try silent.sendText(#"0:init:{"clientid":"silent","token":"\#(token)","name":"notes"}"#)
            let deadline = ContinuousClock.now + .seconds(20)
            try await Task.sleep(for: .milliseconds(100))
            while statistics.openWebSockets > 0, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(50))
            }
            #expect(statistics.openWebSockets == 0)
            withExtendedLifetime(silent) {}
        }
    }
}
