import Foundation
import PostgresTestSupport
import Testing

/// A server restored from a backup (issue 35), on the embedded store (a copy of the data
/// directory) and on PostgreSQL (`pg_dump -Fc`, `pg_restore` into a new database): a real mount
/// saves notes, the backup is taken, it saves more, a node is started on the backup, the old
/// node is killed -9, and the mount fails over to the restored node. Whether the restored node is
/// behind the mount's cv or has taken more changes than the mount had seen (so that the mount's
/// cv counts a change of the other history), afterwards every mount and a fresh mount hold every
/// note ever saved except those someone removed, and the server has them.
@Suite(.serialized, .timeLimit(.minutes(Patience.testMinutes)))
struct RestoreTests {
    enum Storage: String, CaseIterable, CustomTestStringConvertible {
        case sqlite
        case postgres
        var testDescription: String { rawValue }
    }

    /// The notes of the scenario: `a0`... before the backup, `b0`... and an edit of a0 after it.
    static func note(_ name: String, _ revision: Int, by writer: String = "mount") -> String {
        // Keys in order: another mount renders the value so (pretty JSON, sorted keys).
        TwoMountTests.pretty(["by": "\"\(writer)\"", "name": "\"\(name)\"", "revision": "\(revision)"])
    }

    /// Restore, then fail over: the restored node is behind the mount (its cv is from the future).
    @Test(arguments: Storage.allCases) func aRestoredNodeBehindTheMountIsSentWhatItLost(storage: Storage) async throws {
        try await Self.withRestore(storage) { world in
            let expected = try await world.savedBeforeAndAfterTheBackup()
            try await world.restoreAndFailOver()
            try await world.expectEveryMountAndAFreshOne(toHold: expected)
        }
    }

    /// Restore, more changes there from another device (more than the mount had seen since the
    /// backup, with an edit and a removal of notes from before it), then fail over.
    @Test(arguments: Storage.allCases) func aRestoredNodeThatTookOtherChangesIsNotTakenForTheMountsHistory(storage: Storage) async throws {
        try await Self.withRestore(storage) { world in
            var expected = try await world.savedBeforeAndAfterTheBackup()
            try await world.restore()
            // Another device on the restored node only: 30 new notes, an edit of a1, a removal of a2.
            let other = try await world.startMount("other", servers: [world.restoredURL])
            var written: [String: String] = ["a1.json": Self.note("a1", 2, by: "other")]
            for index in 0..<30 { written["c\(index).json"] = Self.note("c\(index)", 1, by: "other") }
            try await world.write(written, in: other)
            try await world.remove(["a2.json"], in: other)
            try await world.sync(other)
            expected.merge(written) { _, new in new }
            expected["a2.json"] = nil
            try await world.failOver()
            try await world.expectEveryMountAndAFreshOne(toHold: expected, besides: [other])
        }
    }

    // MARK: - The world of a restore

    /// A server whose backup can be restored onto a port chosen in advance (the mount lists it
    /// from the start, as an operator's second node), the mount, and what the test saves.
    final class World: @unchecked Sendable {
        let sandbox: Sandbox
        let storage: Storage
        let original: Background
        let originalURL: String
        let restoredPort: Int
        var restoredURL: String { "ws://127.0.0.1:\(restoredPort)" }
        let token: String
        /// How to take the backup, and to start a node on it.
        let backUp: () async throws -> Void
        let startRestored: () async throws -> Background
        var restored: Background?
        var mount: MountProcess!

        init(
            sandbox: Sandbox, storage: Storage, original: Background, originalURL: String, restoredPort: Int, token: String,
            backUp: @escaping () async throws -> Void, startRestored: @escaping () async throws -> Background
        ) {
            self.sandbox = sandbox
            self.storage = storage
            self.original = original
            self.originalURL = originalURL
            self.restoredPort = restoredPort
            self.token = token
            self.backUp = backUp
            self.startRestored = startRestored
        }

        func startMount(_ name: String, servers: [String]) async throws -> MountProcess {
            let arguments = servers.flatMap { ["--server", $0] }
                + ["--app-id", ServerProcess.appID, "--token", token, "--bucket", "notes", "--store", sandbox.root + "/\(name).sqlite"]
            return try await offThePool { try MountProcess(self.sandbox, at: name, arguments: arguments) }
        }

        /// a0–a9 saved and synced; the backup; b0–b9 saved and a0 edited, synced. What the mount holds.
        func savedBeforeAndAfterTheBackup() async throws -> [String: String] {
            mount = try await startMount("mount", servers: [originalURL, restoredURL])
            var before: [String: String] = [:]
            for index in 0..<10 { before["a\(index).json"] = RestoreTests.note("a\(index)", 1) }
            try await write(before, in: mount)
            try await sync(mount)
            try await backUp()
            var after: [String: String] = ["a0.json": RestoreTests.note("a0", 2)]
            for index in 0..<10 { after["b\(index).json"] = RestoreTests.note("b\(index)", 1) }
            try await write(after, in: mount)
            try await sync(mount)
            return before.merging(after) { _, new in new }
        }

        func restore() async throws {
            restored = try await startRestored()
        }

        /// kill -9 of the original node: the mount moves to the restored one.
        func failOver() async throws {
            original.signal(SIGKILL)
            #expect(await offThePool { self.original.waitForExit() })
        }

        func restoreAndFailOver() async throws {
            try await restore()
            try await failOver()
        }

        /// Writes each file (open, write, close) in one python child.
        func write(_ files: [String: String], in mount: MountProcess) async throws {
            let data = try JSONSerialization.data(withJSONObject: files, options: [.sortedKeys])
            try await offThePool {
                try Command.python(
                    "import json, os, sys\nfor name, text in json.loads(sys.argv[2]).items():\n"
                        + "    with open(os.path.join(sys.argv[1], name), 'w') as f: f.write(text)",
                    [mount.path("notes"), String(decoding: data, as: UTF8.self)], in: "/")
            }
        }

        func remove(_ names: [String], in mount: MountProcess) async throws {
            try await offThePool {
                try Command.python(
                    "import os, sys\nfor name in sys.argv[2:]: os.unlink(os.path.join(sys.argv[1], name))",
                    [mount.path("notes")] + names, in: "/")
            }
        }

        /// `bucketfs sync`: every change of the mount acknowledged.
        func sync(_ mount: MountProcess) async throws {
            let output = try await offThePool {
                try self.sandbox.bucketfs(["sync", mount.mountPoint, "--timeout", "\(Int(Patience.seconds))"], timeout: Patience.seconds + 30)
            }
            #expect(output.status == 0, "bucketfs sync \(mount.mountPoint): \(output.stdout) \(output.stderr)")
        }

        /// Every file of the mount's `notes` with its text (a python child: a stuck mount times out).
        func listing(_ mount: MountProcess) -> [String: String]? {
            let script = """
                import json, os, sys
                d = sys.argv[1]
                out = {}
                for name in os.listdir(d):
                    try:
                        with open(os.path.join(d, name)) as f: out[name] = f.read()
                    except FileNotFoundError: pass
                sys.stdout.write(json.dumps(out))
                """
            guard let output = try? Command.run("/usr/bin/env", ["python3", "-c", script, mount.path("notes")], timeout: 60),
                output.status == 0, let object = try? JSONSerialization.jsonObject(with: Data(output.stdout.utf8)) as? [String: String]
            else { return nil }
            return object
        }

        /// The mount (and `besides`) reach `expected`, the mount's sync ends, and a fresh mount
        /// on the restored node shows exactly the same: the server has every note.
        func expectEveryMountAndAFreshOne(toHold expected: [String: String], besides others: [MountProcess] = []) async throws {
            for mount in [mount!] + others {
                var seen: [String: String]?
                let reached = await waitUntil { seen = self.listing(mount); return seen == expected }
                #expect(reached, "\(mount.mountPoint): \(Self.difference(seen, expected))\n\(mount.process.logTail)")
                try await sync(mount)
            }
            let fresh = try await startMount("fresh", servers: [restoredURL])
            var seen: [String: String]?
            let reached = await waitUntil { seen = self.listing(fresh); return seen == expected }
            #expect(reached, "a fresh mount: \(Self.difference(seen, expected))")
            let status = try await offThePool { try self.sandbox.bucketfs(["status", self.mount.mountPoint]) }
            #expect(status.status == 0)
            #expect(
                status.stdout.contains("the server had lost") && status.stdout.contains("(restored from a backup?): sent again"),
                "status says what happened:\n\(status.stdout)")
            #expect(mount.process.log.contains("the server lost"), "the mount's log says what happened:\n\(mount.process.logTail)")
        }

        static func difference(_ seen: [String: String]?, _ expected: [String: String]) -> String {
            guard let seen else { return "unreadable" }
            let missing = Set(expected.keys).subtracting(seen.keys).sorted()
            let extra = Set(seen.keys).subtracting(expected.keys).sorted()
            let differing = expected.keys.filter { seen[$0] != nil && seen[$0] != expected[$0] }.sorted()
                .map { "\($0): \(seen[$0]!.replacingOccurrences(of: "\n", with: " ")) instead of \(expected[$0]!.replacingOccurrences(of: "\n", with: " "))" }
            return "missing \(missing), extra \(extra), differing \(differing)"
        }
    }

    static func withRestore(_ storage: Storage, _ body: @Sendable (World) async throws -> Void) async throws {
        let restoredPort = try PostgresCluster.freePort()
        switch storage {
        case .sqlite:
            let sandbox = try Sandbox()
            defer { sandbox.close() }
            let server = try ServerProcess.start(in: sandbox)
            let backup = sandbox.root + "/backup"
            let world = World(
                sandbox: sandbox, storage: storage, original: server.process, originalURL: server.url, restoredPort: restoredPort,
                token: server.token,
                backUp: {
                    // A copy of the data directory, as a file backup takes it: the server paused
                    // meanwhile, so the copy is one moment (SQLite recovers its WAL on open).
                    server.process.signal(SIGSTOP)
                    defer { server.process.signal(SIGCONT) }
                    let copied = try Command.run("/bin/cp", ["-a", server.dataDirectory, backup], timeout: 60)
                    #expect(copied.status == 0, "cp: \(copied.stderr)")
                },
                startRestored: {
                    let process = try sandbox.start(["serve", "--data", backup, "--port", "\(restoredPort)"], log: "restored.log")
                    #expect(await waitUntil { ServerProcess.port(in: process.log) != nil || !process.isRunning }, "\(process.logTail)")
                    return process
                })
            try await body(world)
        case .postgres:
            try await withPostgresDatabase { cluster, database in
                let sandbox = try Sandbox()
                defer { sandbox.close() }
                let node = try NodeProcess.start(in: sandbox, name: "node", database: cluster.url(database: database))
                let added = try sandbox.bucketfs(
                    ["user", "add", "--database", cluster.url(database: database), "alice@example.com"], input: "correct horse battery\n")
                guard added.status == 0, let token = added.stdout.split(separator: "\n").last.map(String.init), !token.isEmpty else {
                    throw SandboxError("bucketfs user add --database failed (\(added.status)): \(added.stderr)")
                }
                // Where the cluster's owner (who runs pg_dump) may write.
                let dump = cluster.directory + "/backup-\(UUID().uuidString).dump"
                defer { try? FileManager.default.removeItem(atPath: dump) }
                let port = "\(cluster.port)"
                let restoredDatabase = try await cluster.createDatabase()
                defer { Task { await cluster.dropDatabase(restoredDatabase) } }
                let world = World(
                    sandbox: sandbox, storage: storage, original: node.process, originalURL: node.url, restoredPort: restoredPort,
                    token: token,
                    backUp: {
                        // As the README tells operators: pg_dump while the node runs.
                        _ = try await cluster.runTool("pg_dump", ["-h", "127.0.0.1", "-p", port, "-U", "postgres", "-Fc", "-f", dump, database])
                    },
                    startRestored: {
                        _ = try await cluster.runTool(
                            "pg_restore", ["-h", "127.0.0.1", "-p", port, "-U", "postgres", "--no-owner", "-d", restoredDatabase, dump])
                        let process = try sandbox.start(
                            ["serve", "--database", cluster.url(database: restoredDatabase), "--host", "127.0.0.1", "--port", "\(restoredPort)"],
                            log: "restored.log")
                        #expect(await waitUntil { ServerProcess.port(in: process.log) != nil || !process.isRunning }, "\(process.logTail)")
                        return process
                    })
                try await body(world)
            }
        }
    }
}
