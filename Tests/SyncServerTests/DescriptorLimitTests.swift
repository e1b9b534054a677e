import Foundation
import JSONDiff
@testable import SyncServer
import Testing

/// Issue 20: running out of file descriptors crashed the server. With 256 descriptors and a
/// flood of 400 connections, `bucketfs serve` holds its cap (closing the oldest connections
/// that have not logged in for the new ones, and says so), keeps acknowledging changes, and
/// still exits on SIGTERM.
@Suite(.timeLimit(.minutes(2)))
struct DescriptorLimitTests {
    @Test func aFloodUnderALowDescriptorLimitIsCappedAndWritesKeepWorking() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let token = try await ServerStore(directory: directory.path, passwordIterations: testPasswordIterations)
            .createUser(username: "alice@example.com", password: "secret").accessToken
        // A request deadline longer than the flood takes to open on a loaded machine (once past
        // 10 s: the first connections timed out before the cap was reached).
        let server = try await ServeBinary(data: directory.path, prefix: ["prlimit", "--nofile=256:256"], extraArguments: ["--request-timeout", "600"])
        defer { server.stop() }

        let writer = try await TestSocket.connect(port: server.port, appID: "test-app")
        _ = try await writer.authorize(token: token, clientID: "writer")
        var flood: [RawTCP] = []
        for _ in 0..<400 { flood.append(try await RawTCP.open(port: server.port)) }
        for index in 0..<3 {
            #expect(try await create(writer, key: "during\(index)", object: ["n": .integer(Int64(index))]).endVersion == 1)
        }
        #expect(server.process.isRunning)
        flood = []

        // Once the flood is gone, new clients get in again.
        var reader: TestSocket?
        let deadline = ContinuousClock.now + hangGuard
        while reader == nil, ContinuousClock.now < deadline {
            if let socket = try? await TestSocket.connect(port: server.port, appID: "test-app"),
               (try? await socket.authorize(token: token, clientID: "reader")) != nil {
                reader = socket
            } else {
                try await Task.sleep(for: .milliseconds(200))
            }
        }
        let late = try #require(reader)
        #expect(try await create(late, key: "after", object: ["n": 1]).endVersion == 1)
        #expect(server.log().contains("connection cap reached"))
        await late.close()
        await writer.close()
        #expect(await server.signal(SIGTERM, within: .seconds(20)) != nil)
    }
}
