import JSONDiff
import SyncProtocol
@testable import SyncServer
import Testing

/// Issue 20: frame-level violations fail the connection with the code RFC 6455 names, and the
/// server refuses what it could not send back within its own parser's limits.
@Suite(.timeLimit(.minutes(2)))
struct RFC6455Tests {
    private let path = "/sock/1/test-app/websocket"

    @Test func invalidUTF8InATextFrameFailsTheConnectionWith1007() async throws {
        try await withServer { server in
            let socket = try await RawWebSocket.open(port: server.port, path: path)
            try socket.sendFrame(Array("h:".utf8) + [0xC3, 0x28])
            #expect(await socket.receiveCloseCode() == 1007)
        }
    }

    @Test func anUnmaskedClientFrameFailsTheConnectionWith1002() async throws {
        try await withServer { server in
            let socket = try await RawWebSocket.open(port: server.port, path: path)
            // A masked heartbeat answered first, so the check is in place (it is installed at
            // upgrade).
            try socket.sendText("h:1")
            #expect(await socket.receiveText() == "h:2")
            try socket.sendFrame(Array("h:2".utf8), masked: false)
            #expect(await socket.receiveCloseCode() == 1002)
        }
    }

    /// Issue 38: a single frame past the server's limit (4 MiB) is answered with a 1009 close
    /// the client can read, not a reset that destroys it: the server ends its side and drops
    /// what the client is still sending before it closes the connection.
    @Test(arguments: [true, false])
    func aFrameOverTheLimitIsClosedWith1009NotReset(initialised: Bool) async throws {
        try await withServer { server in
            let token = try await makeUser(server)
            let socket = try await RawWebSocket.open(port: server.port, path: path)
            if initialised {
                try socket.sendText(#"0:init:{"clientid":"big","token":"\#(token)","name":"notes"}"#)
                #expect(await socket.receiveText()?.hasPrefix("0:auth:") == true)
            }
            let payload = Array("0:c:".utf8) + Array(repeating: UInt8(ascii: "x"), count: 5 << 20)
            // The server stops reading partway: the rest of the write may fail.
            try? socket.sendFrame(payload)
            #expect(await socket.receiveCloseCode() == 1009)
        }
    }

    @Test func aValueTooDeepToSendBackIsRefusedWith400() async throws {
        try await withServer { server in
            let token = try await makeUser(server)
            let socket = try await server.socket()
            _ = try await socket.authorize(token: token)
            func nested(_ levels: Int) -> String { String(repeating: "[", count: levels) + String(repeating: "]", count: levels) }
            // 509 levels parse in the change (512 with the frame around them), but its index
            // page would be 513 deep.
            let tooDeep = changeFrame(key: "deep", diff: #"{"a":{"o":"+","v":\#(nested(509))}}"#, ccid: newCCID())
            #expect(try rejection(try await socket.receiveMessage(after: tooDeep)).code == 400)
            // 508 fit in both the broadcast and the index page, and a client can read them.
            let deepest = changeFrame(key: "deep", diff: #"{"a":{"o":"+","v":\#(nested(508))}}"#, ccid: newCCID())
            #expect(try appliedChange(try await socket.receiveMessage(after: deepest)).endVersion == 1)
            guard case .channel(0, .index(let page)) = try await socket.receiveMessage(after: "0:i:1:::10") else {
                throw TestFailure("expected an index page")
            }
            #expect(page.index.map(\.id) == ["deep"])
            await socket.close()
        }
    }
}
