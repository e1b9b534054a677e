import ChildProcesses
import Foundation
import JSONDiff
import Logging
import NIOConcurrencyHelpers
import PostgresTestSupport
import SyncProtocol
@testable import SyncServer
import Testing

/// PostgreSQL stopped, started, or not there yet, under real `bucketfs serve --database`
/// nodes. Each test runs its own cluster (`PostgresCluster.started()`): stopping the shared
/// one would fail the tests running beside it.
@Suite struct PostgresFaultTests {
    @Test func postgresStoppedAndStartedUnderLoadLosesNoAcknowledgedChange() async throws {
        let nodes = try await TwoNodes.started()
        defer { nodes.remove() }
        let (cluster, database, token, nodeA, nodeB) = (nodes.cluster, nodes.database, nodes.token, nodes.a, nodes.b)

        // Four writers, two per node, each saving its own entity change after change.
        let progress = LoadProgress()
        let writers = (0..<4).map { LoadWriter(name: "w\($0)", port: $0 % 2 == 0 ? nodeA.port : nodeB.port, token: token, progress: progress) }
        let deadline = ContinuousClock.now + .seconds(150)
        let results = LoadWriter.runAll(writers, until: deadline)
        defer { progress.finish() }
        try await progress.wait(untilEachOf: writers.map(\.name), hasAcknowledged: 5, before: deadline)

        try await cluster.stop(mode: "fast")
        // While it is down: the auth API answers at once that it cannot, instead of hanging.
        let asked = ContinuousClock.now
        let answer = try await Self.authorizeOverHTTP(port: nodeA.port, username: "alice@example.com", password: "secret")
        #expect(answer.hasPrefix("HTTP/1.1 503"), "auth API while PostgreSQL is down: \(answer)")
        #expect(answer.contains("Database unavailable"))
        #expect(ContinuousClock.now - asked < .seconds(20))
        let acknowledgedBefore = progress.acknowledged
        // Down until a node has given up on a change (a writer's connection closed for the
        // database, after the 5 s wait for a pooled connection), not for a fixed while: a fixed
        // 2 s ended before any change gave up on a quick machine.
        let givingUp = ContinuousClock.now + .seconds(60)
        while progress.closedUnavailable == 0, ContinuousClock.now < givingUp { try await Task.sleep(for: .milliseconds(100)) }
        try await cluster.start()
        let restarted = progress.acknowledged
        // Writing goes on after PostgreSQL is back, on both nodes.
        do {
            try await progress.wait(
                untilEachOf: writers.map(\.name), hasAcknowledged: 5, after: restarted, before: min(deadline, ContinuousClock.now + .seconds(60)))
        } catch {
            throw TestFailure("\(error)\n\(Self.warnings(of: [("A", nodeA), ("B", nodeB)], last: 20))")
        }
        progress.finish()
        let outcomes = try await results.value
        #expect(progress.acknowledged.values.reduce(0, +) > acknowledgedBefore.values.reduce(0, +))
        // The nodes closed the connections whose changes they could not commit, saying why, and
        // the writers came back.
        #expect(outcomes.contains { $0.closedUnavailable > 0 }, "no connection closed for the database: \(outcomes)")

        for outcome in outcomes {
            let key = "doc-\(outcome.name)"
            // Every change went in exactly once: one version per change, every field there.
            let rows = try await cluster.administer(
                "SELECT ccid || ' ' || end_version FROM changes WHERE key = '\(key)' ORDER BY cv", database: database)
            let stored = rows.map { $0.split(separator: " ").map(String.init) }
            let versions = stored.map { $0[1] }
            #expect(versions == (1...outcome.changes).map(String.init), "\(key): versions \(versions), \(outcome.changes) changes")
            // Every acknowledged change is stored with the version it was acknowledged with.
            let byCCID = Dictionary(stored.map { ($0[0], $0[1]) }, uniquingKeysWith: { first, _ in first })
            for (ccid, version) in outcome.acknowledged {
                #expect(byCCID[ccid] == String(version), "\(key): acknowledged \(ccid) at \(version), stored \(String(describing: byCCID[ccid]))")
            }
            let data = try await cluster.administer("SELECT data FROM entities WHERE key = '\(key)'", database: database)
            let object = try JSONValue(parsing: Array((data.first ?? "").utf8))
            for index in 0..<outcome.changes {
                #expect(object["f\(index)"] == .integer(Int64(index)), "\(key) lacks f\(index)")
            }
        }
        let duplicates = try await cluster.administer(
            "SELECT key || '.' || end_version FROM changes GROUP BY key, end_version HAVING COUNT(*) > 1", database: database)
        #expect(duplicates.isEmpty, "versions given twice: \(duplicates)")

        // Both nodes serve the same entities and versions.
        for port in [nodeA.port, nodeB.port] {
            let reader = try await TestSocket.connect(port: port, appID: "test-app")
            _ = try await reader.authorize(token: token, clientID: "reader")
            let page = try await Self.index(reader)
            for outcome in outcomes {
                let entry = page.index.first { $0.id == "doc-\(outcome.name)" }
                #expect(entry?.version == outcome.changes, "node on \(port): doc-\(outcome.name) at \(String(describing: entry?.version))")
            }
            await reader.close()
        }
        await cluster.dropDatabase(database)
    }

    /// Outage after outage under writers on two nodes (issue 35: once, every writer stalled
    /// ~26 s after PostgreSQL was back). After each return, no change waits more than 10 s: one
    /// sent while the database was down counts from its return. `scripts/pg-outages` runs the
    /// long loop (5 outages of 10 s, 20 s apart, 10 runs); the suite runs a short one.
    @Test(.timeLimit(.minutes(10))) func afterEachOutageNoChangeWaitsMoreThanTenSeconds() async throws {
        let environment = ProcessInfo.processInfo.environment
        let outages = environment["BUCKETFS_PG_OUTAGES"].flatMap { Int($0) } ?? 2
        let outageSeconds = environment["BUCKETFS_PG_OUTAGE_SECONDS"].flatMap { Int($0) } ?? 6
        let gapSeconds = environment["BUCKETFS_PG_OUTAGE_GAP_SECONDS"].flatMap { Int($0) } ?? 8
        let nodes = try await TwoNodes.started()
        defer { nodes.remove() }
        let (cluster, database, token, nodeA, nodeB) = (nodes.cluster, nodes.database, nodes.token, nodes.a, nodes.b)

        let progress = LoadProgress()
        let writers = (0..<10).map { LoadWriter(name: "w\($0)", port: $0 % 2 == 0 ? nodeA.port : nodeB.port, token: token, progress: progress) }
        let deadline = ContinuousClock.now + .seconds(outages * (outageSeconds + gapSeconds) + 240)
        let results = LoadWriter.runAll(writers, until: deadline)
        defer { progress.finish() }
        try await progress.wait(untilEachOf: writers.map(\.name), hasAcknowledged: 3, before: deadline)
        var returns: [ContinuousClock.Instant] = []
        for _ in 0..<outages {
            try await cluster.stop(mode: "fast")
            try await Task.sleep(for: .seconds(outageSeconds))
            try await cluster.start()
            returns.append(.now)
            try await Task.sleep(for: .seconds(gapSeconds))
        }
        // Writing went on after the last return, on both nodes.
        try await progress.wait(untilEachOf: writers.map(\.name), hasAcknowledged: 3, after: progress.acknowledged, before: deadline)
        progress.finish()
        let outcomes = try await results.value
        var slowest: (wait: Duration, writer: String, detail: String)?
        for outcome in outcomes {
            for (sent, acknowledged) in outcome.waits {
                // Counted from the database's last return before the acknowledgement, if the
                // change was sent before it (while down, or as it went down).
                let start = max(sent, returns.last { $0 <= acknowledged } ?? sent)
                let wait = acknowledged - start
                if wait > (slowest?.wait ?? .zero) {
                    let outage = returns.lastIndex { $0 <= acknowledged }.map { "after return \($0 + 1) of \(outages)" } ?? "before any outage"
                    slowest = (wait, outcome.name, outage)
                }
            }
        }
        print("PostgreSQL outages: the longest wait for an acknowledgement was \(slowest.map { "\($0.wait), \($0.writer) \($0.detail)" } ?? "none")")
        #expect(
            (slowest?.wait ?? .zero) < .seconds(10),
            "\(slowest.map { "\($0.writer) waited \($0.wait) \($0.detail)" } ?? ""): \(outcomes)\n\(Self.warnings(of: [("A", nodeA), ("B", nodeB)], last: 12))")
        await cluster.dropDatabase(database)
    }

    @Test func aNodeStartedWhilePostgresIsDownComesUpOnceItIsBack() async throws {
        let cluster = try await PostgresCluster.started()
        defer { cluster.remove() }
        let database = try await cluster.createDatabase()
        let token = try await Self.makeUser(cluster, database: database)
        let logs = try TemporaryDirectory()
        defer { logs.remove() }
        try await cluster.stop(mode: "fast")
        let url = cluster.url(database: database)
        async let starting = ServeBinary(data: logs.path, database: url)
        try await Task.sleep(for: .seconds(2))
        try await cluster.start()
        let node = try await starting
        defer { node.stop() }
        let socket = try await TestSocket.connect(port: node.port, appID: "test-app")
        _ = try await socket.authorize(token: token, clientID: "late")
        let applied = try await create(socket, key: "after", object: ["n": 1])
        #expect(applied.endVersion == 1)
        await socket.close()
    }

    @Test func aNodeGivesUpOnADatabaseThatStaysDownWithAClearMessage() async throws {
        // Nothing listens on port 1.
        let started = ContinuousClock.now
        let logs = try TemporaryDirectory()
        defer { logs.remove() }
        let serve = ChildProcess()
        serve.executableURL = URL(fileURLWithPath: ServeBinary.binary)
        serve.arguments = ["serve", "--database", "postgres://postgres@127.0.0.1:1/nothing", "--database-wait", "1", "--port", "0"]
        FileManager.default.createFile(atPath: logs.path + "/serve.log", contents: nil)
        let output = try FileHandle(forWritingTo: URL(fileURLWithPath: logs.path + "/serve.log"))
        serve.standardOutput = output
        serve.standardError = output
        try serve.run()
        // Its own time is about 5 s; a busy machine running the other tests of this suite beside
        // it once took 32. It must end on its own, not be stopped.
        while serve.isRunning, ContinuousClock.now - started < .seconds(120) { try await Task.sleep(for: .milliseconds(50)) }
        let endedOnItsOwn = !serve.isRunning
        if serve.isRunning { serve.terminate() }
        serve.waitUntilExit()
        #expect(serve.terminationStatus != 0)
        let log = (try? String(contentsOfFile: logs.path + "/serve.log", encoding: .utf8)) ?? ""
        #expect(log.contains("Error: database: postgres://postgres@127.0.0.1:1/nothing (waited 1.0 seconds): database unavailable"), "\(log)")
        #expect(endedOnItsOwn, "still running after \(ContinuousClock.now - started)")
    }

    // MARK: - Helpers

    static func makeUser(_ cluster: PostgresCluster, database: String) async throws -> String {
        var logger = Logger(label: "test-postgres")
        logger.logLevel = .warning
        let accounts = try await PostgresServerStore.open(
            cluster.location(database: database), passwordIterations: testPasswordIterations, logger: logger)
        defer { accounts.close() }
        return try await accounts.createUser(username: "alice@example.com", password: "secret").accessToken
    }

    /// Each node's last warning and error lines, for whoever finds out why one did not come back.
    static func warnings(of nodes: [(String, ServeBinary)], last count: Int) -> String {
        nodes.map { name, node in
            "node \(name):\n" + node.log().split(separator: "\n").filter { $0.contains(" warning ") || $0.contains(" error ") }
                .suffix(count).joined(separator: "\n")
        }.joined(separator: "\n")
    }

    /// One `POST /1/test-app/authorize/` on a plain TCP connection; the whole answer.
    static func authorizeOverHTTP(port: Int, username: String, password: String) async throws -> String {
        let body = JSONValue.object(["username": .string(username), "password": .string(password)]).compactRendered()
        let request = "POST /1/test-app/authorize/ HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Simperium-API-Key: key\r\n"
            + "Content-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n" + body
        let connection = try await RawTCP.open(port: port)
        connection.send(Array(request.utf8))
        guard let answer = await connection.readUntilClosed(within: .seconds(30)) else { throw TestFailure("no answer from the auth API") }
        return answer
    }

    static func index(_ socket: TestSocket) async throws -> IndexPage {
        socket.send("0:i:1:::100")
        while true {
            if case .channel(0, .index(let page)) = try await socket.receiveMessage() { return page }
        }
    }
}

/// A PostgreSQL cluster of its own (stopping the shared one would fail the tests beside), a
/// database with a user, and two `bucketfs serve --database` nodes on it.
struct TwoNodes {
    let cluster: PostgresCluster
    let database: String
    /// The user's Simperium token.
    let token: String
    let logs: TemporaryDirectory
    let a: ServeBinary
    let b: ServeBinary

    static func started() async throws -> TwoNodes {
        let cluster = try await PostgresCluster.started()
        var logs: TemporaryDirectory?
        var nodes: [ServeBinary] = []
        do {
            let database = try await cluster.createDatabase()
            let token = try await PostgresFaultTests.makeUser(cluster, database: database)
            let directory = try TemporaryDirectory()
            logs = directory
            for node in ["a", "b"] {
                try FileManager.default.createDirectory(atPath: directory.path + "/" + node, withIntermediateDirectories: true)
                nodes.append(try await ServeBinary(data: directory.path + "/" + node, database: cluster.url(database: database)))
            }
            return TwoNodes(cluster: cluster, database: database, token: token, logs: directory, a: nodes[0], b: nodes[1])
        } catch {
            for node in nodes { node.stop() }
            logs?.remove()
            cluster.remove()
            throw error
        }
    }

    /// Stops the nodes and removes the cluster and the logs.
    func remove() {
        a.stop()
        b.stop()
        logs.remove()
        cluster.remove()
    }
}

/// How many changes each writer saw acknowledged, and whether the load should stop.
final class LoadProgress: Sendable {
    private let state = NIOLockedValueBox<(acknowledged: [String: Int], closedUnavailable: Int, finished: Bool)>(([:], 0, false))

    var acknowledged: [String: Int] { state.withLockedValue { $0.acknowledged } }
    var isFinished: Bool { state.withLockedValue { $0.finished } }
    /// Connections the nodes closed saying their database was unavailable, so far.
    var closedUnavailable: Int { state.withLockedValue { $0.closedUnavailable } }

    func acknowledge(_ writer: String) { state.withLockedValue { $0.acknowledged[writer, default: 0] += 1 } }
    func closedForTheDatabase() { state.withLockedValue { $0.closedUnavailable += 1 } }
    func finish() { state.withLockedValue { $0.finished = true } }

    /// Waits until each writer has `count` acknowledgements more than in `after`.
    func wait(untilEachOf writers: [String], hasAcknowledged count: Int, after: [String: Int] = [:], before deadline: ContinuousClock.Instant) async throws {
        while true {
            let now = acknowledged
            if writers.allSatisfy({ now[$0, default: 0] >= after[$0, default: 0] + count }) { return }
            guard ContinuousClock.now < deadline else { throw TestFailure("writers stalled: \(now), before: \(after)") }
            try await Task.sleep(for: .milliseconds(50))
        }
    }
}

/// A client writing through outages as bucketfs's does: each change sets one more field
/// `f<n>` on its own entity `doc-<name>`; a change not acknowledged (connection gone) is
/// sent again, with the same ccid, after a reconnect with backoff; 409 (a duplicate) says
/// an earlier send of it was committed though its acknowledgement was lost. An error answer
/// (500 included) fails the test: a change the database could not take is answered by closing
/// the connection, which makes every client resend, where some clients take 500 as final.
struct LoadWriter: Sendable {
    struct Result: Sendable, CustomStringConvertible {
        var name: String
        /// Changes committed: f0..<changes.
        var changes: Int
        /// ccid -> the version its acknowledgement gave.
        var acknowledged: [String: Int]
        var reconnects: Int
        /// Connections the server closed saying its database was unavailable.
        var closedUnavailable = 0
        /// Each committed change: when it was first sent and when its acknowledgement came.
        var waits: [(sent: ContinuousClock.Instant, acknowledged: ContinuousClock.Instant)] = []

        var description: String {
            "\(name): \(changes) changes, \(acknowledged.count) acknowledged, \(reconnects) reconnects (\(closedUnavailable) for the database)"
        }
    }

    let name: String
    let port: Int
    let token: String
    let progress: LoadProgress

    /// Every writer running until `deadline` (or its progress is finished), in one task.
    static func runAll(_ writers: [LoadWriter], until deadline: ContinuousClock.Instant) -> Task<[Result], any Error> {
        Task {
            try await withThrowingTaskGroup(of: Result.self) { group in
                for writer in writers { group.addTask { try await writer.run(until: deadline) } }
                var results: [Result] = []
                for try await result in group { results.append(result) }
                return results
            }
        }
    }

    func run(until deadline: ContinuousClock.Instant) async throws -> Result {
        var result = Result(name: name, changes: 0, acknowledged: [:], reconnects: 0)
        var socket: TestSocket?
        var backoff: Duration = .milliseconds(100)
        var ccid = newCCID()
        var firstSent: ContinuousClock.Instant?
        let key = "doc-\(name)"
        defer { if let open = socket { Task { await open.close() } } }
        while !progress.isFinished {
            guard ContinuousClock.now < deadline else { throw TestFailure("\(result) at the deadline") }
            do {
                if socket == nil {
                    let fresh = try await TestSocket.connect(port: port, appID: "test-app")
                    socket = fresh
                    _ = try await fresh.authorize(token: token, clientID: name)
                }
                guard let socket else { continue }
                let index = result.changes
                let diff = JSONDiffing.encode(JSONDiffing.diff(from: [:], to: ["f\(index)": .integer(Int64(index))])).compactRendered()
                socket.send(changeFrame(key: key, diff: diff, sv: index == 0 ? nil : index, ccid: ccid))
                if firstSent == nil { firstSent = .now }
                var answered = false
                while !answered {
                    for change in try changes(try await socket.receiveMessage(timeout: .seconds(20))) {
                        switch change {
                        case .applied(let applied) where applied.ccids.contains(ccid):
                            result.acknowledged[ccid] = applied.endVersion
                            progress.acknowledge(name)
                            answered = true
                        case .rejected(let rejection) where rejection.ccids.contains(ccid):
                            switch rejection.code {
                            case ChangeErrorCode.duplicate.rawValue: answered = true
                            default: throw FatalRefusal(description: "\(key): change \(index) refused with \(rejection.code)")
                            }
                        default:
                            continue // another writer's change
                        }
                    }
                }
                result.changes += 1
                result.waits.append((firstSent ?? .now, .now))
                firstSent = nil
                ccid = newCCID()
                backoff = .milliseconds(100)
                try await Task.sleep(for: .milliseconds(10))
            } catch let refusal as FatalRefusal {
                throw refusal
            } catch {
                // Not acknowledged: reconnect after a while and send it again.
                if let socket {
                    if await socket.isEnded, let frame = await socket.closeFrame, frame.reason == StreamingEndpoint.unavailableReason {
                        result.closedUnavailable += 1
                        progress.closedForTheDatabase()
                    }
                    await socket.close()
                }
                socket = nil
                result.reconnects += 1
                try await Task.sleep(for: backoff)
                backoff = min(backoff * 2, .seconds(1))
            }
        }
        return result
    }

    private struct FatalRefusal: Error, CustomStringConvertible { var description: String }
}
