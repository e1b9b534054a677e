import Foundation
import JSONDiff
import SyncProtocol
@testable import SyncServer
import Testing

@Suite(.timeLimit(.minutes(2)))
struct RobustnessTests {
    /// Sends `frame` on a fresh connection (authorized first when `authorize`), and returns the close frame.
    private func closeReason(_ server: RunningServer, token: String, authorize: Bool, _ frame: String) async throws -> String? {
        let socket = try await server.socket()
        if authorize { _ = try await socket.authorize(token: token) }
        socket.send(frame)
        let close = try await socket.waitForClose()
        await socket.close()
        return close?.reason
    }

    @Test func protocolViolationsCloseWithAReasonAndOthersKeepWorking() async throws {
        try await withServer { server in
            let token = try await makeUser(server)
            let bystander = try await server.socket()
            _ = try await bystander.authorize(token: token, clientID: "bystander")

            let cases: [(frame: String, authorize: Bool, reasonContains: String)] = [
                ("garbage", false, "unknown command"),
                ("0:i::::10", false, "before a successful init"),
                ("0:c:{}", false, "before a successful init"),
                ("0:zz:1", true, "unknown command"),
                ("0:init:not json", false, "init"),
                ("0:c:{not json", true, "c payload"),
                ("h:abc", false, "h"),
                ("0:e:keywithoutversion", true, "e"),
                ("0:auth:me", true, "auth"),
                ("", false, "empty"),
            ]
            for testCase in cases {
                let reason = try await closeReason(server, token: token, authorize: testCase.authorize, testCase.frame)
                #expect(reason?.contains(testCase.reasonContains) == true, "frame \(testCase.frame.debugDescription): \(String(describing: reason))")
            }

            // The bystander saw nothing and still syncs.
            #expect(try await bystander.expectSilence() == nil)
            let applied = try await create(bystander, key: "still-alive", object: ["ok": true])
            #expect(applied.endVersion == 1)
            #expect(try await bystander.request("h:1") == "h:2")
            await bystander.close()
        }
    }

    @Test func oversizedAndBinaryFramesCloseTheConnection() async throws {
        try await withServer(configure: { $0.maxFrameSize = 64 * 1024 }) { server in
            let token = try await makeUser(server)
            let big = try await server.socket()
            _ = try await big.authorize(token: token)
            big.send("0:c:" + String(repeating: "x", count: 200 * 1024))
            let close = try await big.waitForClose()
            #expect(close?.closeCode == .messageTooLarge)
            await big.close()

            let binary = try await server.socket()
            binary.sendBinary(Array("h:1".utf8))
            #expect(try await binary.waitForClose()?.reason?.contains("binary") == true)
            await binary.close()

            let fine = try await server.socket()
            _ = try await fine.authorize(token: token)
            try await create(fine, key: "after", object: ["n": 1])
            await fine.close()
        }
    }

    @Test func slowReaderIsClosedWithoutBlockingOthers() async throws {
        try await withServer(configure: { $0.maxOutboundBufferBytes = 256 * 1024 }) { server in
            let token = try await makeUser(server)
            let slow = try await RawWebSocket.open(port: server.port, path: "/sock/1/test-app/websocket", receiveBufferBytes: 2048)
            try slow.sendText(#"0:init:{"clientid":"slow","token":"\#(token)","name":"notes"}"#)

            let writer = try await server.socket()
            _ = try await writer.authorize(token: token, clientID: "writer")
            // 80 × 32 KiB is ten times the slow reader's outbound limit: it must overflow.
            let payload = String(repeating: "y", count: 32 * 1024)
            var acknowledged: [String] = []
            for index in 0..<80 {
                // The writer's acknowledgement arrives although a peer is not reading (the
                // receive is bounded only by the hang guard, never by a speed expectation).
                let applied = try await create(writer, key: "big\(index)", object: ["blob": .string(payload)])
                #expect(applied.endVersion == 1)
                acknowledged.append(applied.id)
            }
            #expect(acknowledged == (0..<80).map { "big\($0)" })
            // Nothing else was queued for the writer, and it still syncs afterwards.
            #expect(try await writer.request("h:7") == "h:8")
            // The slow connection was closed by the server.
            #expect(await slow.drainUntilClosed(within: hangGuard))
            await writer.close()
        }
    }

    @Test func wrongTypesInInitCloseWithAReason() async throws {
        try await withServer { server in
            let socket = try await server.socket()
            socket.send(#"0:init:{"token":5,"name":"notes"}"#)
            let close = try await socket.waitForClose()
            #expect(close?.reason?.contains("init") == true)
            await socket.close()
        }
    }
}
