import ChildProcesses
import Foundation
import JSONDiff
import PostgresTestSupport
import SyncProtocol
@testable import SyncServer
import Testing

/// What README's "Running a cluster" tells an operator to do, done for real: accounts made
/// with `bucketfs user add|token --database`, haproxy (examples/haproxy.cfg as shipped) in
/// front of two nodes, a backup with pg_dump restored into a new database.
@Suite struct PostgresOperationsTests {
    /// The repository's examples/haproxy.cfg.
    static let haproxyExample = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("examples/haproxy.cfg").path

    @Test func haproxyFromTheExampleServesBothAPIsAndSurvivesANodeStopping() async throws {
        try await withPostgresDatabase { cluster, database in
            let url = cluster.url(database: database)
            let directory = try TemporaryDirectory()
            defer { directory.remove() }
            // Accounts as an operator makes them: on the command line, against the database.
            let added = try await Self.bucketfs(["user", "add", "--database", url, "--password", "secret", "alice@example.com"])
            let token = try #require(added.split(separator: "\n").last.map(String.init))
            let issued = try await Self.bucketfs(["user", "token", "--database", url, "alice@example.com"])
            let second = try #require(issued.split(separator: "\n").last.map(String.init))
            #expect(token != second)

            for node in ["a", "b"] { try FileManager.default.createDirectory(atPath: directory.path + "/" + node, withIntermediateDirectories: true) }
            let nodeA = try await ServeBinary(data: directory.path + "/a", database: url)
            defer { nodeA.stop() }
            let nodeB = try await ServeBinary(data: directory.path + "/b", database: url)
            defer { nodeB.stop() }
            let front = try PostgresCluster.freePort()
            let haproxy = try await Haproxy(
                example: Self.haproxyExample, directory: directory.path,
                ports: ["127.0.0.1:8080": front, "127.0.0.1:8081": nodeA.port, "127.0.0.1:8082": nodeB.port])
            defer { haproxy.stop() }

            // The auth API through haproxy: a login gives a token.
            let login = try await PostgresFaultTests.authorizeOverHTTP(port: front, username: "alice@example.com", password: "secret")
            #expect(login.hasPrefix("HTTP/1.1 200"), "\(login)")
            #expect(login.contains("access_token"))

            // The streaming API through haproxy (a WebSocket upgrade): two clients, each on
            // whichever node haproxy picks, see each other's changes.
            let first = try await TestSocket.connect(port: front, appID: "test-app")
            let other = try await TestSocket.connect(port: front, appID: "test-app")
            _ = try await first.authorize(token: token, clientID: "first")
            _ = try await other.authorize(token: second, clientID: "other")
            guard case .channel(0, .index) = try await other.receiveMessage(after: "0:i::::10") else { throw TestFailure("expected an index page") }
            let applied = try await create(first, key: "through-haproxy", object: ["n": 1])
            #expect(try appliedChange(try await other.receiveMessage(timeout: PostgresNodesTests.crossNodeBound)) == applied)
            await first.close()
            await other.close()

            // Node A stops: haproxy's checks take it out, and every client gets to node B.
            nodeA.stop()
            let deadline = ContinuousClock.now + .seconds(30)
            var served = 0
            var attempts = 0
            while served < 6 {
                guard ContinuousClock.now < deadline else { throw TestFailure("only \(served) of 6 clients served in \(attempts) attempts after node A stopped") }
                attempts += 1
                do {
                    let socket = try await TestSocket.connect(port: front, appID: "test-app")
                    defer { Task { await socket.close() } }
                    _ = try await socket.authorize(token: token, clientID: "after-\(served)")
                    _ = try await create(socket, key: "after-\(served)", object: ["n": .integer(Int64(served))])
                    served += 1
                } catch {
                    // A connection haproxy sent to node A before its check noticed.
                    served = 0
                    try await Task.sleep(for: .milliseconds(200))
                }
            }
            // Once it noticed, no client failed: the last six in a row were served.
            #expect(served == 6)
        }
    }

    /// Issue 38: the example checks `GET /readyz`, so a node whose database is gone leaves the
    /// rotation while its process still runs, and comes back with its database. Node A has a
    /// cluster of its own (stopped here), node B the shared one.
    @Test func haproxyTakesANodeWhoseDatabaseIsGoneOutOfRotationAndBack() async throws {
        try await withPostgresDatabase { shared, sharedDatabase in
            let own = try await PostgresCluster.started()
            defer { own.remove() }
            let ownDatabase = try await own.createDatabase()
            let directory = try TemporaryDirectory()
            defer { directory.remove() }
            for node in ["a", "b"] { try FileManager.default.createDirectory(atPath: directory.path + "/" + node, withIntermediateDirectories: true) }
            let nodeA = try await ServeBinary(data: directory.path + "/a", database: own.url(database: ownDatabase))
            defer { nodeA.stop() }
            let nodeB = try await ServeBinary(data: directory.path + "/b", database: shared.url(database: sharedDatabase))
            defer { nodeB.stop() }
            let front = try PostgresCluster.freePort()
            let haproxy = try await Haproxy(
                example: Self.haproxyExample, directory: directory.path,
                ports: ["127.0.0.1:8080": front, "127.0.0.1:8081": nodeA.port, "127.0.0.1:8082": nodeB.port])
            defer { haproxy.stop() }

            try await own.stop(mode: "fast")
            // Taken out by the HTTP check (layer 7: the node answers 503), not for a refused connection.
            try await haproxy.waitForLine(containing: ["node1", "is DOWN", "Layer7"], within: .seconds(60))
            #expect(!haproxy.log().contains("node2 is DOWN"))
            // Every request now goes to node B: ten in a row are ready.
            for _ in 0..<10 { #expect(try await httpGet(port: front, "/readyz").status == 200) }

            try await own.start()
            try await haproxy.waitForLine(containing: ["node1", "is UP"], within: .seconds(120))
            #expect(nodeA.process.isRunning)
        }
    }

    @Test func aBackupWithPgDumpRestoredIntoANewDatabaseServesTheSameEntitiesAndVersions() async throws {
        try await withPostgresDatabase { cluster, database in
            let url = cluster.url(database: database)
            let directory = try TemporaryDirectory()
            defer { directory.remove() }
            let added = try await Self.bucketfs(["user", "add", "--database", url, "--password", "secret", "alice@example.com"])
            let token = try #require(added.split(separator: "\n").last.map(String.init))
            try FileManager.default.createDirectory(atPath: directory.path + "/a", withIntermediateDirectories: true)
            let node = try await ServeBinary(data: directory.path + "/a", database: url)
            defer { node.stop() }
            let writer = try await TestSocket.connect(port: node.port, appID: "test-app")
            _ = try await writer.authorize(token: token, clientID: "writer")
            for index in 0..<5 { _ = try await create(writer, key: "note\(index)", object: ["n": .integer(Int64(index))]) }
            // Versions past 1, and a deleted entity.
            let edit = JSONDiffing.encode(JSONDiffing.diff(from: [:], to: ["edited": true])).compactRendered()
            let edited = try appliedChange(try ServerMessage.parse(
                try await writer.request(changeFrame(key: "note0", diff: edit, sv: 1, ccid: newCCID()))))
            #expect(edited.endVersion == 2)
            let deleted = try appliedChange(try ServerMessage.parse(
                try await writer.request(#"0:c:{"id":"note1","o":"-","sv":1,"ccid":"\#(newCCID())"}"#)))
            #expect(deleted.id == "note1")
            let before = try await PostgresFaultTests.index(writer)
            await writer.close()

            // pg_dump (custom format) as the operator would, restored into a new database.
            let dump = cluster.directory + "/backup-\(UUID().uuidString).dump"
            let port = "\(cluster.port)"
            _ = try await cluster.runTool("pg_dump", ["-h", "127.0.0.1", "-p", port, "-U", "postgres", "-Fc", "-f", dump, database])
            let restored = try await cluster.createDatabase()
            defer { Task { await cluster.dropDatabase(restored) } }
            _ = try await cluster.runTool("pg_restore", ["-h", "127.0.0.1", "-p", port, "-U", "postgres", "--no-owner", "-d", restored, dump])
            try? FileManager.default.removeItem(atPath: dump)

            try FileManager.default.createDirectory(atPath: directory.path + "/b", withIntermediateDirectories: true)
            let restoredNode = try await ServeBinary(data: directory.path + "/b", database: cluster.url(database: restored))
            defer { restoredNode.stop() }
            let reader = try await TestSocket.connect(port: restoredNode.port, appID: "test-app")
            _ = try await reader.authorize(token: token, clientID: "reader")
            let after = try await PostgresFaultTests.index(reader)
            #expect(after.index.map(\.id) == before.index.map(\.id))
            #expect(after.index.map(\.version) == before.index.map(\.version))
            #expect(after.index.map(\.data) == before.index.map(\.data))
            // The same counter, in a history of its own: a restore begins one (issue 35).
            #expect(after.current.prefix(12) == before.current.prefix(12))
            #expect(after.current != before.current)
            // A cv handed out before is answered `cv:?`, though the backup holds the change it names.
            #expect(try await reader.request("0:cv:\(edited.changeVersion)") == "0:cv:?")
            #expect(before.index.first { $0.id == "note0" }?.version == edited.endVersion)
            #expect(!before.index.contains { $0.id == "note1" })
            // And it goes on from there: the next version, the next cv.
            let again = JSONDiffing.encode(JSONDiffing.diff(from: [:], to: ["again": true])).compactRendered()
            let next = try appliedChange(try ServerMessage.parse(
                try await reader.request(changeFrame(key: "note0", diff: again, sv: 2, ccid: newCCID()))))
            #expect(next.endVersion == 3)
            #expect(next.changeVersion.prefix(12) > deleted.changeVersion.prefix(12))
            await reader.close()
        }
    }

    /// Runs the `bucketfs` binary to its end; its standard output (it must exit 0).
    static func bucketfs(_ arguments: [String]) async throws -> String {
        try await offThePool { try runBucketfs(arguments) }
    }

    private static func runBucketfs(_ arguments: [String]) throws -> String {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let outputPath = directory.path + "/out"
        FileManager.default.createFile(atPath: outputPath, contents: nil)
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: ServeBinary.binary)
        process.arguments = arguments
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: outputPath))
        process.standardError = FileHandle.nullDevice
        try process.run()
        process.waitUntilExit()
        let output = (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? ""
        guard process.terminationStatus == 0 else { throw TestFailure("bucketfs \(arguments.joined(separator: " ")) failed: \(output)") }
        return output.trimmingCharacters(in: .whitespacesAndNewlines)
    }
}

/// A real haproxy (Debian's /usr/sbin/haproxy) running a configuration file with its
/// addresses replaced; stopped on `stop()`. Fails (does not skip) where haproxy is missing.
final class Haproxy: @unchecked Sendable {
    let process = ChildProcess()
    private(set) var logPath = ""

    init(example: String, directory: String, ports: [String: Int]) async throws {
        let binary = "/usr/sbin/haproxy"
        guard FileManager.default.isExecutableFile(atPath: binary) else {
            throw TestFailure("haproxy is not installed: run scripts/bootstrap (apt-get install haproxy)")
        }
        // Addresses are replaced in the directives; the comments may name them too.
        var lines = try String(contentsOfFile: example, encoding: .utf8).components(separatedBy: "\n")
        for (address, port) in ports {
            let uses = lines.indices.filter { !lines[$0].trimmingCharacters(in: .whitespaces).hasPrefix("#") && lines[$0].contains(address) }
            guard uses.count == 1 else { throw TestFailure("\(example) uses \(address) \(uses.count) times, expected once") }
            lines[uses[0]] = lines[uses[0]].replacingOccurrences(of: address, with: "127.0.0.1:\(port)")
        }
        let configuration = lines.joined(separator: "\n")
        let path = directory + "/haproxy.cfg"
        try configuration.write(toFile: path, atomically: true, encoding: .utf8)
        logPath = directory + "/haproxy.log"
        FileManager.default.createFile(atPath: logPath, contents: nil)
        let log = try FileHandle(forWritingTo: URL(fileURLWithPath: logPath))
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = ["-f", path, "-db"]
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = log
        process.standardError = log
        try process.run()
        // Up once it accepts connections on the front port.
        guard let front = ports["127.0.0.1:8080"] else { throw TestFailure("no front port") }
        let deadline = ContinuousClock.now + .seconds(20)
        while (try? connectedLoopbackSocket(port: front) { _ in }).map({ close($0) }) == nil {
            guard process.isRunning, ContinuousClock.now < deadline else {
                stop()
                throw TestFailure("haproxy did not start: \((try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "")")
            }
            try await Task.sleep(for: .milliseconds(50))
        }
    }

    /// What haproxy said (in the foreground it reports each server going DOWN or UP).
    func log() -> String {
        (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? ""
    }

    /// Waits until haproxy's log has a line containing every one of `words`.
    func waitForLine(containing words: [String], within limit: Duration) async throws {
        let deadline = ContinuousClock.now + limit
        while !log().split(separator: "\n").contains(where: { line in words.allSatisfy { line.contains($0) } }) {
            guard ContinuousClock.now < deadline else { throw TestFailure("haproxy never said \(words) within \(limit):\n\(log())") }
            try await Task.sleep(for: .milliseconds(100))
        }
    }

    func stop() {
        if process.isRunning { process.terminate() }
        process.waitUntilExit()
    }
}
