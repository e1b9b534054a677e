import Foundation
import PostgresTestSupport
import Testing

/// Two `bucketfs serve --database` processes on one PostgreSQL database, and real mounts on
/// them: saves cross nodes, and a mount given both nodes outlives the kill -9 of its node.
@Suite(.serialized, .timeLimit(.minutes(Patience.testMinutes)))
struct ClusterTests {
    @Test func threeMountsOnTwoNodesSeeEachOthersSaves() async throws {
        try await Self.withTwoNodes { sandbox, nodeA, nodeB, token, _ in
            // Each mount is waited for until the kernel shows it: on a thread of its own.
            let mounts = try await offThePool {
                try [("a1", nodeA), ("a2", nodeA), ("b1", nodeB)].map { name, node in
                    try MountProcess(sandbox, at: name, arguments: Self.mountArguments(sandbox, name, servers: [node], token: token))
                }
            }
            let (a1, a2, b1) = (mounts[0], mounts[1], mounts[2])
            for (index, mount) in mounts.enumerated() {
                try Files.write(mount.path("notes/from-\(index).json"), TwoMountTests.pretty(["from": "\(index)"]))
            }
            for (index, _) in mounts.enumerated() {
                let expected = TwoMountTests.pretty(["from": "\(index)"])
                for other in mounts {
                    let seen = try await offThePool { try Files.waitFor(other.path("notes/from-\(index).json"), toHold: expected) }
                    #expect(seen == expected, "\(other.mountPoint)")
                }
            }
            // An edit on node B's mount reaches both mounts of node A.
            let edited = TwoMountTests.pretty(["edited": "true", "from": "0"])
            try Files.write(b1.path("notes/from-0.json"), edited)
            for mount in [a1, a2] {
                let seen = try await offThePool { try Files.waitFor(mount.path("notes/from-0.json"), toHold: edited) }
                #expect(seen == edited, "\(mount.mountPoint)")
            }
        }
    }

    @Test func aMountWhoseNodeIsKilledUnderLoadMovesToTheOtherAndLosesNothing() async throws {
        try await Self.withTwoNodes { sandbox, nodeA, nodeB, token, database in
            let (watcher, mover) = try await offThePool {
                try (
                    MountProcess(sandbox, at: "watcher", arguments: Self.mountArguments(sandbox, "watcher", servers: [nodeB], token: token)),
                    MountProcess(sandbox, at: "mover", arguments: Self.mountArguments(sandbox, "mover", servers: [nodeA, nodeB], token: token))
                )
            }
            let status = try Self.status(sandbox, mover)
            #expect(status?.server == nodeA.url && status?.serverPosition == 1, "\(String(describing: status))")

            // 240 saves to 40 files, a few milliseconds apart; node A dies in the middle of them.
            let saves = 240
            let files = 40
            let writer = Writer(directory: mover.path("notes"), saves: saves, files: files)
            // Saves flow through node A to the mount on node B before node A dies.
            #expect(await waitUntil { (try? Command.run("/usr/bin/test", ["-e", watcher.path("notes/f05.json")]))?.status == 0 })
            nodeA.process.signal(SIGKILL)
            #expect(await offThePool { nodeA.process.waitForExit() })
            let writerStatus = await offThePool { writer.finish() }
            #expect(writerStatus == 0, "the writer failed")

            // Every file's last save reaches the mount on node B.
            for file in 0..<files {
                let last = Writer.lastSave(of: file, saves: saves, files: files)
                let expected = Writer.text(save: last, file: file)
                let seen = try await offThePool { try Files.waitFor(watcher.path(Writer.name(file)), toHold: expected) }
                #expect(seen == expected, "\(Writer.name(file))")
            }
            // The mover is on node B, says so, and owes the server nothing.
            #expect(await waitUntil { (try? Self.status(sandbox, mover)).flatMap { $0 }.map { $0.pendingSaves == 0 } == true })
            let moved = try #require(try Self.status(sandbox, mover))
            #expect(moved.server == nodeB.url)
            #expect(moved.serverPosition == 2)
            #expect(moved.servers == [nodeA.url, nodeB.url])
            #expect(moved.connection == "connected")
            let text = try sandbox.bucketfs(["status", mover.mountPoint])
            #expect(text.stdout.contains("server      \(nodeB.url) (2 of 2)"), "\(text.stdout)")
            #expect(mover.process.log.contains("moved to server \(nodeB.url) (2 of 2) (from \(nodeA.url))"), "\(mover.process.logTail)")
            #expect(mover.process.log.contains("server \(nodeA.url) (1 of 2) lost"), "\(mover.process.logTail)")

            // In the database: each entity's versions run 1, 2, ... once each, the latest is the
            // entity's version, and no change (client id + ccid) was applied twice.
            let cluster = try await PostgresCluster.running()
            let perKey = try await cluster.administer("""
                SELECT c.key || ' ' || count(*) || ' ' || count(DISTINCT c.end_version) || ' ' || max(c.end_version) || ' ' || max(e.version)
                FROM changes c JOIN entities e ON e.bucket_id = c.bucket_id AND e.key = c.key GROUP BY c.key ORDER BY c.key
                """, database: database)
            #expect(perKey.count == files)
            for row in perKey {
                let fields = row.split(separator: " ")
                #expect(fields.count == 5 && Set(fields.dropFirst()).count == 1, "versions of \(row): changes, distinct versions, highest, entity's")
            }
            let applied = try await cluster.administer(
                "SELECT (count(*) - count(DISTINCT (client_id, ccid)))::text FROM changes", database: database)
            #expect(applied == ["0"])
        }
    }

    /// `mount` arguments for a mount of `notes` on `servers`, in this order.
    static func mountArguments(_ sandbox: Sandbox, _ name: String, servers: [NodeProcess], token: String) -> [String] {
        servers.flatMap { ["--server", $0.url] }
            + ["--app-id", ServerProcess.appID, "--token", token, "--bucket", "notes", "--store", sandbox.root + "/\(name).sqlite"]
    }

    /// What `bucketfs status --json` says of the mount's server and connection.
    struct MountStatus: Decodable, CustomStringConvertible {
        struct Connection: Decodable { var state: String }
        var server: String
        var servers: [String]?
        var serverPosition: Int?
        var pendingSaves: Int
        private var connectionState: Connection
        var connection: String { connectionState.state }

        private enum CodingKeys: String, CodingKey {
            case server, servers, serverPosition, pendingSaves
            case connectionState = "connection"
        }

        var description: String { "\(server) \(serverPosition.map(String.init) ?? "-") of \(servers?.count ?? 1), \(connection), \(pendingSaves) pending" }
    }

    static func status(_ sandbox: Sandbox, _ mount: MountProcess) throws -> MountStatus? {
        struct Report: Decodable { var mounts: [MountStatus] }
        let output = try sandbox.bucketfs(["status", mount.mountPoint, "--json"])
        guard output.status == 0 else { return nil }
        return try JSONDecoder().decode(Report.self, from: Data(output.stdout.utf8)).mounts.first
    }

    /// A sandbox, a fresh database, two nodes on it and a user's token (`bucketfs user add --database`).
    static func withTwoNodes(_ body: @Sendable (Sandbox, NodeProcess, NodeProcess, String, String) async throws -> Void) async throws {
        try await withPostgresDatabase { cluster, database in
            let sandbox = try Sandbox()
            defer { sandbox.close() }
            let url = cluster.url(database: database)
            let nodeA = try NodeProcess.start(in: sandbox, name: "node-a", database: url)
            let nodeB = try NodeProcess.start(in: sandbox, name: "node-b", database: url)
            let added = try sandbox.bucketfs(["user", "add", "--database", url, "alice@example.com"], input: "correct horse battery\n")
            guard added.status == 0, let token = added.stdout.split(separator: "\n").last.map(String.init), !token.isEmpty else {
                throw SandboxError("bucketfs user add --database failed (\(added.status)): \(added.stderr)")
            }
            try await body(sandbox, nodeA, nodeB, token, database)
        }
    }
}

/// `bucketfs serve --database URL` on 127.0.0.1, port 0; stopped by the sandbox.
struct NodeProcess: Sendable {
    let process: Background
    let port: Int

    var url: String { "ws://127.0.0.1:\(port)" }

    static func start(in sandbox: Sandbox, name: String, database: String) throws -> NodeProcess {
        let process = try sandbox.start(["serve", "--database", database, "--host", "127.0.0.1", "--port", "0"], log: "\(name).log")
        var port: Int?
        _ = eventually {
            port = ServerProcess.port(in: process.log)
            return port != nil || !process.isRunning
        }
        guard let port else { throw SandboxError("\(name) printed no port (running: \(process.isRunning)):\n\(process.logTail)") }
        return NodeProcess(process: process, port: port)
    }
}

/// Saves `f00.json` ... in a mount from a python child on a thread of its own, save `i` to file
/// `i % files`, a few milliseconds apart, each with open/write/close as an editor does.
final class Writer: @unchecked Sendable {
    private let done = DispatchSemaphore(value: 0)
    private let lock = NSLock()
    private var status: Int32 = -1

    init(directory: String, saves: Int, files: Int) {
        let script = """
            import sys, time
            directory, saves, files = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
            for i in range(saves):
                with open('%s/f%02d.json' % (directory, i % files), 'w') as f:
                    f.write('{\\n  "file": %d,\\n  "save": %d\\n}\\n' % (i % files, i))
                time.sleep(0.02)
            """
        Thread.detachNewThread { [self] in
            let output = try? Command.run("/usr/bin/env", ["python3", "-c", script, directory, "\(saves)", "\(files)"])
            lock.withLock { status = output?.status ?? -1 }
            done.signal()
        }
    }

    /// The writer's exit status once it ended (-1: it could not run or did not end in time).
    /// Waits longer than the writer's own timeout, which then ends it first.
    func finish(timeout: Double = Patience.seconds + 60) -> Int32 {
        guard done.wait(timeout: .now() + timeout) == .success else { return -1 }
        return lock.withLock { status }
    }

    static func name(_ file: Int) -> String { String(format: "notes/f%02d.json", file) }

    static func text(save: Int, file: Int) -> String { TwoMountTests.pretty(["file": "\(file)", "save": "\(save)"]) }

    static func lastSave(of file: Int, saves: Int, files: Int) -> Int { (saves - 1) - ((saves - 1 - file) % files) }
}
