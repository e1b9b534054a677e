import Foundation
import JSONDiff
@testable import SyncServer
import Testing

/// Issue 38: at the connection cap, connections that never log in do not crowd out real
/// clients (each held its slot for the 10 s init deadline, and 8 of 30 clients were refused
/// during a flood). A new connection takes the place of the oldest one that has not logged in;
/// connections that have logged in keep theirs.
@Suite(.timeLimit(.minutes(3)))
struct ConnectionCapTests {
    @Test func realClientsConnectDuringAFloodAtTheCap() async throws {
        let statistics = ServerStatistics()
        try await withServer(configure: {
            $0.maxConnections = 40
            $0.statistics = statistics
        }) { server in
            let token = try await makeUser(server)
            let early = try await server.socket()
            _ = try await early.authorize(token: token, clientID: "early")

            // Stuck connections past the cap, and more coming all along while clients connect.
            var flood: [RawTCP] = []
            for _ in 0..<60 { flood.append(try await RawTCP.open(port: server.port)) }
            let flooding = Task {
                var more: [RawTCP] = []
                while !Task.isCancelled {
                    if let connection = try? await RawTCP.open(port: server.port) { more.append(connection) }
                    try? await Task.sleep(for: .milliseconds(5))
                }
                return more.count
            }
            var clients: [TestSocket] = []
            var attempts = 0
            for index in 0..<10 {
                // As a mount does, a client cut short before it logged in tries again (on a
                // loaded machine a handshake can outlast the flood's turnover of the cap), with
                // a key of its own each time.
                let client = try await initialisedWithinAShortDeadline(attempts: 5) {
                    attempts += 1
                    let socket = try await server.socket()
                    do {
                        // A bucket each: no other client's change waits ahead of an answer.
                        _ = try await socket.authorize(token: token, bucket: "b\(index)", clientID: "client\(index)")
                        #expect(try await create(socket, key: "k\(attempts)", object: ["n": .integer(Int64(index))]).endVersion == 1)
                        return socket
                    } catch {
                        await socket.close()
                        throw error
                    }
                }
                clients.append(client)
            }
            flooding.cancel()
            let flooded = await flooding.value
            // The early client, logged in before the flood, kept its place, as did each client.
            #expect(try await early.request("h:1") == "h:2")
            for client in clients { #expect(try await client.request("h:1") == "h:2") }
            // The oldest stuck connections were closed for room: far more than one cap's worth
            // came, and every one of the first 60 is gone.
            #expect(try #require(statistics.closesByReason[ConnectionCap.closedForRoom]) >= 60 - 40 + 1, "\(flooded) more flooded, \(attempts) attempts")
            for connection in flood { #expect(await connection.readUntilClosed(within: hangGuard) != nil) }
            for client in clients { await client.close() }
            await early.close()
        }
    }

    @Test func whenLoggedInConnectionsFillTheCapANewOneIsRefused() async throws {
        try await withServer(configure: { $0.maxConnections = 3 }) { server in
            let token = try await makeUser(server)
            var clients: [TestSocket] = []
            for index in 0..<3 {
                let client = try await server.socket()
                _ = try await client.authorize(token: token, clientID: "client\(index)")
                clients.append(client)
            }
            // Closed at once: not at the request deadline (120 s here), past the hang guard.
            let refused = try await RawTCP.open(port: server.port)
            #expect(await refused.readUntilClosed(within: hangGuard) != nil)
            for client in clients { #expect(try await client.request("h:1") == "h:2") }
            await clients[0].close()
            // A place is free again once one has gone.
            let deadline = ContinuousClock.now + hangGuard
            var late: TestSocket?
            while late == nil, ContinuousClock.now < deadline {
                if let socket = try? await server.socket(), (try? await socket.authorize(token: token, clientID: "late")) != nil {
                    late = socket
                } else {
                    try await Task.sleep(for: .milliseconds(50))
                }
            }
            #expect(try await #require(late).request("h:1") == "h:2")
        }
    }
}
