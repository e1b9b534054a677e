import Foundation
import SyncProtocol
@testable import SyncServer
import Testing

/// Issue 20, "smaller": a refused upgrade for an app id not served is a 404, and bucket names
/// no client can hold as a directory are refused.
@Suite(.timeLimit(.minutes(2)))
struct UpgradeAndBucketNameTests {
    @Test func anUpgradeForAnAppIDNotServedIsAnswered404() async throws {
        try await withServer(configure: { $0.appIDs = ["test-app"] }) { server in
            let tcp = try await RawTCP.open(port: server.port)
            tcp.send(Array((
                "GET /sock/1/other-app/websocket HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                    + "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
            ).utf8))
            let answer = try #require(await tcp.readUntilClosed(within: .seconds(20)))
            #expect(answer.hasPrefix("HTTP/1.1 404 Not Found\r\n"))
            // The served app id still upgrades.
            let socket = try await server.socket()
            #expect(try await socket.request("h:1") == "h:2")
            await socket.close()
        }
    }

    @Test func dotNamesAndWindowsDeviceNamesAreRefused() async throws {
        try await withServer { server in
            let token = try await makeUser(server)
            let socket = try await server.socket()
            // Accepted names first: a successful init ends the connection's init deadline, which a
            // loaded machine could otherwise reach while only refusals had come back.
            for (offset, name) in ["console", "a.b", "..a", "com10"].enumerated() {
                _ = try await socket.authorize(token: token, bucket: name, channel: 20 + offset)
            }
            for (channel, name) in [".", "..", "CON", "con", "con.txt", "LPT1", "nul.json"].enumerated() {
                let request = InitRequest(clientID: "c", token: token, appID: "test-app", name: name, library: "tests", version: "1", cmd: nil)
                socket.send("\(channel):init:\(request.renderPayload())")
                guard case .channel(channel, .authError(let code, _)) = try await socket.receiveMessage() else {
                    throw TestFailure("bucket \(name) was not refused")
                }
                #expect(code == 500, "bucket \(name)")
            }
            await socket.close()
        }
    }
}
