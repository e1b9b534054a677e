import ChildProcesses
import Foundation
import Logging
import PostgresNIO
import SyncServer

/// A PostgreSQL cluster of this test process's own: initdb into a temporary directory, started
/// on a free loopback port, as the `postgres` user when the tests run as root (PostgreSQL
/// refuses root). One per process, started on first use; a watchdog process stops it and
/// removes its directory once this process is gone, however it ends. A machine without
/// PostgreSQL fails the tests that need it (Debian: `apt-get install postgresql`; scripts/bootstrap).
public final class PostgresCluster: Sendable {
    public let port: Int
    public let directory: String
    public let binDirectory: String

    private static let shared = Task {
        // Off the cooperative pool: starting waits for initdb and pg_ctl.
        try await offThePool { try PostgresCluster() }
    }

    /// The process's cluster, started on first use.
    public static func running() async throws -> PostgresCluster {
        try await shared.value
    }

    /// A cluster of the caller's own, for a test that stops and starts it under running nodes
    /// (the shared one serves tests running at the same time). `remove()` it when done.
    public static func started() async throws -> PostgresCluster {
        try await offThePool { try PostgresCluster() }
    }

    /// How long `pg_ctl start` waits for the server to accept connections: a hang guard, sized
    /// for a machine busy with other builds (it returns as soon as the server is up).
    private static let startSeconds = "300"

    private init() throws {
        binDirectory = try Self.findBinaries()
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("bucketfs-pg-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        if getuid() == 0 {
            try Self.run("/bin/chown", ["-R", "postgres:postgres", directory])
        }
        let data = directory + "/data"
        try Self.runAsOwner(binDirectory + "/initdb", ["-D", data, "-A", "trust", "-U", "postgres", "--no-sync", "--no-locale", "-E", "UTF8"])
        try Self.startWatchdog(binDirectory: binDirectory, directory: directory)
        // The free port may be taken before the server binds it (this process's own servers
        // bind port 0 meanwhile: seen in scripts/test's first group): another one then.
        var attempt = 1
        while true {
            let candidate = try Self.freePort()
            do {
                try Self.runAsOwner(binDirectory + "/pg_ctl", Self.startArguments(directory: directory, port: candidate))
                port = candidate
                break
            } catch {
                // The server's own words on why it stopped (its log goes with the directory).
                let log = (try? String(contentsOfFile: directory + "/postgres.log", encoding: .utf8)) ?? ""
                if attempt < 5 && log.contains("Address already in use") {
                    attempt += 1
                    continue
                }
                throw PostgresClusterFailure("\(error)\npostgres.log:\n" + log.split(separator: "\n").suffix(15).joined(separator: "\n"))
            }
        }
    }

    /// `pg_ctl start`'s arguments: waits for the server, listening on loopback `port` only.
    private static func startArguments(directory: String, port: Int) -> [String] {
        [
            "-D", directory + "/data", "-l", directory + "/postgres.log", "-w", "-t", startSeconds,
            "-o", "-p \(port) -k \(directory) -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=300", "start",
        ]
    }

    /// A URL for `bucketfs serve --database`.
    public func url(database: String) -> String {
        "postgres://postgres@127.0.0.1:\(port)/\(database)"
    }

    public func location(database: String) throws -> PostgresLocation {
        try PostgresLocation(url: url(database: database))
    }

    /// Creates an empty database with a fresh name and returns the name.
    public func createDatabase() async throws -> String {
        let name = "bucketfs_test_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").prefix(12).lowercased()
        try await administer("CREATE DATABASE \(name)")
        return name
    }

    /// Drops a database, closing whatever connections are left on it.
    public func dropDatabase(_ name: String) async {
        try? await administer("DROP DATABASE IF EXISTS \(name) WITH (FORCE)")
    }

    /// Runs one statement on `database` (async: tests must not block the pool's threads) and
    /// returns its first column as text, row by row.
    @discardableResult
    public func administer(_ sql: String, database: String = "postgres") async throws -> [String] {
        var logger = Logger(label: "test-postgres-admin")
        logger.logLevel = .warning
        let configuration = PostgresConnection.Configuration(
            host: "127.0.0.1", port: port, username: "postgres", password: nil, database: database, tls: .disable
        )
        let connection = try await PostgresConnection.connect(configuration: configuration, id: 1, logger: logger)
        do {
            var values: [String] = []
            for try await row in try await connection.query(PostgresQuery(unsafeSQL: sql), logger: logger) {
                values.append(String(describing: row.first.map { $0.bytes.map { String(buffer: $0) } ?? "NULL" } ?? ""))
            }
            try await connection.close()
            return values
        } catch {
            try? await connection.close()
            throw error
        }
    }

    /// Stops the cluster at once (a crash, as far as the nodes can tell) and starts it again.
    public func restart(downFor pause: Duration = .zero) async throws {
        try await stop(mode: "immediate")
        try await Task.sleep(for: pause)
        try await start()
    }

    /// `pg_ctl stop -m MODE` (fast: clients are disconnected, what committed is kept). Off the
    /// cooperative pool, as every wait for a tool here: pg_ctl waits seconds on a busy machine,
    /// and the servers under test in this process need the pool's two threads meanwhile.
    public func stop(mode: String = "fast") async throws {
        try await offThePool { try self.runAsOwner(self.binDirectory + "/pg_ctl", ["-D", self.directory + "/data", "-m", mode, "-w", "stop"]) }
    }

    public func start() async throws {
        try await offThePool { try self.runAsOwner(self.binDirectory + "/pg_ctl", Self.startArguments(directory: self.directory, port: self.port)) }
    }

    /// Stops a cluster of `started()` and removes its directory.
    public func remove() {
        try? runAsOwner(binDirectory + "/pg_ctl", ["-D", directory + "/data", "-m", "immediate", "-w", "stop"])
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// A PostgreSQL tool of this cluster's version (pg_dump, psql), run as the cluster's owner.
    public func runTool(_ name: String, _ arguments: [String]) async throws -> String {
        try await offThePool { try self.runAsOwner(self.binDirectory + "/" + name, arguments) }
    }

    @discardableResult
    private func runAsOwner(_ tool: String, _ arguments: [String]) throws -> String {
        try Self.runAsOwner(tool, arguments)
    }

    @discardableResult
    private static func runAsOwner(_ tool: String, _ arguments: [String]) throws -> String {
        if getuid() == 0 {
            try run("/usr/sbin/runuser", ["-u", "postgres", "--", tool] + arguments)
        } else {
            try run(tool, arguments)
        }
    }

    /// Stops the cluster and removes its directory when this process exits (polled each second).
    private static func startWatchdog(binDirectory: String, directory: String) throws {
        let owner = getuid() == 0 ? "/usr/sbin/runuser -u postgres -- " : ""
        let script = """
            while kill -0 \(getpid()) 2>/dev/null; do sleep 1; done
            \(owner)\(binDirectory)/pg_ctl -D \(directory)/data -m immediate stop >/dev/null 2>&1
            rm -rf \(directory)
            """
        _ = try spawn("/usr/bin/setsid", ["/bin/sh", "-c", script], outputPath: "/dev/null")
    }

    private static func findBinaries() throws -> String {
        let root = "/usr/lib/postgresql"
        let versions = ((try? FileManager.default.contentsOfDirectory(atPath: root)) ?? []).compactMap(Int.init).sorted()
        for version in versions.reversed() {
            let bin = "\(root)/\(version)/bin"
            if FileManager.default.isExecutableFile(atPath: bin + "/initdb") { return bin }
        }
        throw PostgresClusterFailure("PostgreSQL is not installed (no \(root)/*/bin/initdb): run scripts/bootstrap (apt-get install postgresql)")
    }

    /// Runs `tool` to its end.
    @discardableResult
    public static func run(_ tool: String, _ arguments: [String]) throws -> String {
        // A file, not a pipe: the server pg_ctl starts inherits the descriptors and would keep
        // a pipe open for as long as it runs.
        let outputPath = FileManager.default.temporaryDirectory.appendingPathComponent("bucketfs-pg-output-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: outputPath) }
        let process = try spawn(tool, arguments, outputPath: outputPath)
        process.waitUntilExit()
        let text = (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? ""
        guard process.terminationReason == .exit, process.terminationStatus == 0 else {
            throw PostgresClusterFailure("\(tool) \(arguments.joined(separator: " ")) failed (status \(process.terminationStatus)): \(text)")
        }
        return text
    }

    /// Starts `tool` with standard input from /dev/null and its output to `outputPath`; no other
    /// descriptor of this process reaches it (the server, which outlives the test, would hold
    /// this process's sockets open, and a connection the server under test closes would never close).
    public static func spawn(_ tool: String, _ arguments: [String], outputPath: String) throws -> ChildProcess {
        let descriptor = open(outputPath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else { throw PostgresClusterFailure("cannot write \(outputPath): errno \(errno)") }
        let output = FileHandle(fileDescriptor: descriptor, closeOnDealloc: true)
        defer { try? output.close() }
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: tool)
        process.arguments = arguments
        process.standardInput = nil
        process.standardOutput = output
        process.standardError = output
        do {
            try process.run()
        } catch {
            throw PostgresClusterFailure("\(error)")
        }
        return process
    }

    /// A loopback TCP port nothing listens on (for this process's own servers).
    public static func freePort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw PostgresClusterFailure("socket failed") }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0 else { throw PostgresClusterFailure("bind failed") }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let named = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        guard named == 0 else { throw PostgresClusterFailure("getsockname failed") }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}

/// A fresh database on the process's cluster for `body`, dropped afterwards.
public func withPostgresDatabase<T: Sendable>(_ body: @Sendable (PostgresCluster, String) async throws -> T) async throws -> T {
    let cluster = try await PostgresCluster.running()
    let name = try await cluster.createDatabase()
    do {
        let result = try await body(cluster, name)
        await cluster.dropDatabase(name)
        return result
    } catch {
        await cluster.dropDatabase(name)
        throw error
    }
}

/// Why the test cluster could not do what it was asked.
public struct PostgresClusterFailure: Error, CustomStringConvertible {
    public let description: String
    init(_ description: String) { self.description = description }
}
