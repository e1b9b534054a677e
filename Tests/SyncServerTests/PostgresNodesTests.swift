import Foundation
import JSONDiff
import Logging
import SyncProtocol
import Synchronization
import PostgresTestSupport
@testable import SyncServer
import Testing

/// Two real `bucketfs serve --database` processes on one PostgreSQL database: changes cross
/// nodes, concurrent writers to one entity through both lose nothing, a restarted node catches
/// its clients up.
@Suite struct PostgresNodesTests {
    /// How long a change may take to reach a client of the other node (a hang guard with room
    /// for a loaded machine; delivery speed is the benchmarks' business).
    static let crossNodeBound: Duration = .seconds(10)

    /// Two nodes on a fresh database (migrated by `serve --migrate-only`) and a user's token.
    private func withTwoNodes(_ body: @Sendable (ServeBinary, ServeBinary, String, String, TemporaryDirectory) async throws -> Void) async throws {
        try await withPostgresDatabase { cluster, database in
            let url = cluster.url(database: database)
            let logs = try TemporaryDirectory()
            defer { logs.remove() }
            let migrated = try PostgresCluster.run(ServeBinary.binary, ["serve", "--database", url, "--migrate-only"])
            #expect(migrated.contains("up to date"))
            // A second run finds nothing to do.
            _ = try PostgresCluster.run(ServeBinary.binary, ["serve", "--database", url, "--migrate-only"])
            var logger = Logger(label: "test-postgres")
            logger.logLevel = .warning
            let accounts = try await PostgresServerStore.open(
                cluster.location(database: database), passwordIterations: testPasswordIterations, logger: logger)
            let token = try await accounts.createUser(username: "alice@example.com", password: "secret").accessToken
            accounts.close()
            try FileManager.default.createDirectory(atPath: logs.path + "/a", withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: logs.path + "/b", withIntermediateDirectories: true)
            let nodeA = try await ServeBinary(data: logs.path + "/a", database: url)
            defer { nodeA.stop() }
            let nodeB = try await ServeBinary(data: logs.path + "/b", database: url)
            defer { nodeB.stop() }
            try await body(nodeA, nodeB, token, url, logs)
        }
    }

    /// Another node's changes reach this node's handler at the same stack depth however many
    /// deliveries came before. Held as a bare closure in a lock, the handler came out of every
    /// delivery wrapped in two more reabstraction thunks, and was stored back so: each delivery
    /// made the next deeper and slower, and a long-running node would in the end have
    /// overflowed its stack.
    @Test func eachDeliveryOfAnotherNodesChangesRunsAtTheSameDepth() async throws {
        try await withPostgresDatabase { cluster, database in
            var logger = Logger(label: "test-postgres")
            logger.logLevel = .warning
            let location = try cluster.location(database: database)
            let writer = try await PostgresServerStore.open(location, passwordIterations: testPasswordIterations, logger: logger)
            defer { writer.close() }
            let reader = try await PostgresServerStore.open(location, passwordIterations: testPasswordIterations, logger: logger)
            defer { reader.close() }
            let depths = Mutex<[Int]>([])
            reader.deliverForeignChanges { _, _ in depths.withLock { $0.append(Thread.callStackReturnAddresses.count) } }
            let rounds = 12
            for round in 0..<rounds {
                let change = ChangeRequest(
                    id: "k\(round)", operation: .modify, diff: JSONDiffing.diff(from: [:], to: ["n": .integer(Int64(round))]),
                    sourceVersion: nil, ccid: "depth\(round)")
                let verdict = try await PostgresBatchTests.submitAtOnce([(client: "depth-test", request: change)], to: writer)
                guard verdict.first?.hasPrefix("accepted") == true else {
                    Issue.record("change \(round) not accepted: \(verdict)")
                    return
                }
                // Each change its own delivery: the next is written once this one arrived.
                let deadline = ContinuousClock.now + Self.crossNodeBound
                while depths.withLock({ $0.count }) <= round, ContinuousClock.now < deadline {
                    try await Task.sleep(for: .milliseconds(5))
                }
            }
            let seen = depths.withLock { $0 }
            #expect(seen.count == rounds)
            #expect(Set(seen).count == 1, "stack depths \(seen)")
        }
    }

    @Test func aChangeOnOneNodeReachesAClientOfTheOther() async throws {
        try await withTwoNodes { nodeA, nodeB, token, _, _ in
            let writer = try await TestSocket.connect(port: nodeA.port, appID: "test-app")
            let reader = try await TestSocket.connect(port: nodeB.port, appID: "test-app")
            _ = try await writer.authorize(token: token, clientID: "writer")
            _ = try await reader.authorize(token: token, clientID: "reader")
            // Its first command ends the hold on broadcasts after `auth`.
            guard case .channel(0, .index(let empty)) = try await reader.receiveMessage(after: "0:i::::10") else {
                throw TestFailure("expected an index page")
            }
            #expect(empty.index.isEmpty)
            let applied = try await create(writer, key: "note", object: ["text": "from A"])
            let seen = try appliedChange(try await reader.receiveMessage(timeout: Self.crossNodeBound))
            #expect(seen == applied)
            // And back: a change on B reaches A.
            let back = try await create(reader, key: "reply", object: ["text": "from B"])
            #expect(try appliedChange(try await writer.receiveMessage(timeout: Self.crossNodeBound)) == back)
            #expect(back.changeVersion > applied.changeVersion)
            await writer.close()
            await reader.close()
        }
    }

    @Test func concurrentWritersToOneEntityThroughBothNodesLoseNothing() async throws {
        try await withTwoNodes { nodeA, nodeB, token, _, _ in
            let first = try await TestSocket.connect(port: nodeA.port, appID: "test-app")
            let second = try await TestSocket.connect(port: nodeB.port, appID: "test-app")
            _ = try await first.authorize(token: token, clientID: "first")
            _ = try await second.authorize(token: token, clientID: "second")
            let created = try await create(first, key: "shared", object: ["start": 0])
            let rounds = 15
            // Each writer adds its own fields to the same entity at once, from the version it
            // last saw: the server rebases stale ones; every change must be applied once.
            async let firstAcks = Self.write(first, prefix: "a", rounds: rounds, from: created.endVersion ?? 1)
            async let secondAcks = Self.write(second, prefix: "b", rounds: rounds, from: created.endVersion ?? 1)
            let (a, b) = try await (firstAcks, secondAcks)
            let versions = (a + b).compactMap(\.endVersion)
            #expect(versions.count == 2 * rounds)
            #expect(Set(versions).count == versions.count, "a version was given twice: \(versions.sorted())")
            #expect(Set(versions) == Set(2...(2 * rounds + 1)))
            #expect(a.compactMap(\.endVersion) == a.compactMap(\.endVersion).sorted())
            #expect(b.compactMap(\.endVersion) == b.compactMap(\.endVersion).sorted())
            let cvs = (a + b).map(\.changeVersion)
            #expect(Set(cvs).count == cvs.count)

            // The entity holds every field, on both nodes.
            for socket in [first, second] {
                let index = try await Self.index(socket)
                let entry = try #require(index.index.first { $0.id == "shared" })
                #expect(entry.version == 2 * rounds + 1)
                let data = try #require(entry.data)
                for round in 0..<rounds {
                    #expect(data["a\(round)"] == .integer(Int64(round)))
                    #expect(data["b\(round)"] == .integer(Int64(round)))
                }
            }
            await first.close()
            await second.close()
        }
    }

    @Test func aRestartedNodeCatchesItsClientsUpOnce() async throws {
        try await withTwoNodes { nodeA, nodeB, token, url, logs in
            let writer = try await TestSocket.connect(port: nodeA.port, appID: "test-app")
            _ = try await writer.authorize(token: token, clientID: "writer")
            let before = try await create(writer, key: "before", object: ["n": 0])

            let listener = try await TestSocket.connect(port: nodeB.port, appID: "test-app")
            _ = try await listener.authorize(token: token, clientID: "listener")
            #expect(try await listener.request("0:cv:\(before.changeVersion)") == "0:c:[]")
            nodeB.stop() // SIGKILL: no goodbye
            _ = try? await listener.waitForClose()

            var missed: [AppliedChange] = []
            for index in 0..<5 { missed.append(try await create(writer, key: "k\(index)", object: ["n": .integer(Int64(index))])) }

            try FileManager.default.createDirectory(atPath: logs.path + "/b-again", withIntermediateDirectories: true)
            let restarted = try await ServeBinary(data: logs.path + "/b-again", database: url)
            defer { restarted.stop() }
            let again = try await TestSocket.connect(port: restarted.port, appID: "test-app")
            _ = try await again.authorize(token: token, clientID: "listener")
            again.send("0:cv:\(before.changeVersion)")
            var caughtUp: [AppliedChange] = []
            while caughtUp.count < missed.count {
                for change in try changes(try await again.receiveMessage(timeout: Self.crossNodeBound)) {
                    guard case .applied(let applied) = change else { throw TestFailure("unexpected \(change)") }
                    caughtUp.append(applied)
                }
            }
            #expect(caughtUp == missed)
            // A change after the restart arrives once, in order.
            let after = try await create(writer, key: "after", object: ["n": 9])
            #expect(try appliedChange(try await again.receiveMessage(timeout: Self.crossNodeBound)) == after)
            #expect(try await again.expectSilence(for: .milliseconds(300)) == nil)
            await writer.close()
            await again.close()
        }
    }

    @Test func aNodeWhoseListenConnectionDroppedCatchesUp() async throws {
        try await withTwoNodes { nodeA, nodeB, token, url, _ in
            let writer = try await TestSocket.connect(port: nodeA.port, appID: "test-app")
            let reader = try await TestSocket.connect(port: nodeB.port, appID: "test-app")
            _ = try await writer.authorize(token: token, clientID: "writer")
            _ = try await reader.authorize(token: token, clientID: "reader")
            guard case .channel(0, .index) = try await reader.receiveMessage(after: "0:i::::10") else {
                throw TestFailure("expected an index page")
            }
            // Cut the nodes' LISTEN connections: notifications sent until they are back are lost.
            let database = url.components(separatedBy: "/").last ?? ""
            let cut = try await PostgresCluster.running().administer("""
                SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                WHERE datname = '\(database)' AND query ILIKE 'LISTEN%'
                """)
            #expect(cut.count == 2, "expected both nodes' LISTEN connections, cut \(cut)")
            var written: [AppliedChange] = []
            for index in 0..<3 { written.append(try await create(writer, key: "k\(index)", object: ["n": .integer(Int64(index))])) }
            var received: [AppliedChange] = []
            while received.count < written.count {
                for change in try changes(try await reader.receiveMessage(timeout: Self.crossNodeBound)) {
                    guard case .applied(let applied) = change else { throw TestFailure("unexpected \(change)") }
                    received.append(applied)
                }
            }
            #expect(received == written)
            #expect(try await reader.expectSilence(for: .milliseconds(300)) == nil)
            await writer.close()
            await reader.close()
        }
    }

    // MARK: - Helpers

    /// Sends `rounds` modifications adding `<prefix><round>`, each from the newest version the
    /// socket saw; returns this writer's acknowledgements in order.
    private static func write(_ socket: TestSocket, prefix: String, rounds: Int, from version: Int) async throws -> [AppliedChange] {
        var known = version
        var acks: [AppliedChange] = []
        for round in 0..<rounds {
            let ccid = newCCID()
            let diff = JSONDiffing.encode(JSONDiffing.diff(from: [:], to: ["\(prefix)\(round)": .integer(Int64(round))])).compactRendered()
            socket.send(changeFrame(key: "shared", diff: diff, sv: known, ccid: ccid))
            while true {
                for change in try changes(try await socket.receiveMessage()) {
                    switch change {
                    case .applied(let applied):
                        known = max(known, applied.endVersion ?? known)
                        if applied.ccids.contains(ccid) { acks.append(applied) }
                    case .rejected(let rejection):
                        throw TestFailure("change refused: \(rejection)")
                    }
                }
                if acks.count == round + 1 { break }
            }
        }
        return acks
    }

    private static func index(_ socket: TestSocket) async throws -> IndexPage {
        socket.send("0:i:1:::100")
        while true {
            let message = try await socket.receiveMessage()
            if case .channel(0, .index(let page)) = message { return page }
        }
    }
}

/// The schema and the notices, without a running node.
@Suite struct PostgresSchemaTests {
    @Test func twoNodesStartingAtOnceMigrateOnce() async throws {
        try await withPostgresDatabase { cluster, database in
            var logger = Logger(label: "test-postgres")
            logger.logLevel = .warning
            let location = try cluster.location(database: database)
            async let first = PostgresServerStore.open(location, passwordIterations: testPasswordIterations, logger: logger)
            async let second = PostgresServerStore.open(location, passwordIterations: testPasswordIterations, logger: logger)
            let stores = try await [first, second]
            for store in stores { store.close() }
            // Both opened; the migration ran once, and running them again applies nothing.
            #expect(try await PostgresServerStore.migrate(location, logger: logger).isEmpty)
        }
    }

    @Test func noticesStayWithinThePayloadLimit() {
        let many = Dictionary(uniqueKeysWithValues: (1...5_000).map { (Int64($0), Int64(1_000_000 + $0)) })
        let payload = PostgresNotice.payload(newestCV: 1_005_000, buckets: many)
        #expect(payload.utf8.count < 8_000)
        #expect(payload.hasSuffix(" *"))
        #expect(PostgresNotice.committedCV(payload) == 1_005_000)
        let few = PostgresNotice.payload(newestCV: 42, buckets: [7: 41, 3: 42])
        #expect(few == "42 3:42 7:41")
        #expect(PostgresNotice.committedCV(few) == 42)
    }
}
