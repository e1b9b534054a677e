import Foundation
import Hummingbird
import Logging
import SyncServer

/// The real sync server on 127.0.0.1 (port 0) over a real SQLite file in a fresh temp dir, or
/// over a PostgreSQL database (a node of several sharing it).
public final class BenchServer: Sendable {
    public let port: Int
    /// Users and tokens of the store behind this node.
    public let accounts: any ServerAccounts
    private let backend: ServerBackend
    private let directory: String?
    private let task: Task<Void, any Error>

    private init(port: Int, backend: ServerBackend, directory: String?, task: Task<Void, any Error>) {
        self.port = port
        self.backend = backend
        self.accounts = backend.accounts
        self.directory = directory
        self.task = task
    }

    /// A node over a fresh SQLite file.
    public static func start() async throws -> BenchServer {
        let directory = temporaryPath("bucketfs-bench-server")
        // Production settings except the password KDF cost, which only slows user creation.
        let store = try ServerStore(directory: directory, passwordIterations: 1_000)
        return try await start(.sqlite(store), directory: directory)
    }

    /// A node over the PostgreSQL database at `databaseURL` (migrated on open).
    public static func start(databaseURL: String) async throws -> BenchServer {
        var logger = Logger(label: "bench-postgres")
        logger.logLevel = .error
        let backend = try await ServerBackend.open(data: nil, databaseURL: databaseURL, passwordIterations: 1_000, logger: logger)
        return try await start(backend, directory: nil)
    }

    private static func start(_ backend: ServerBackend, directory: String?) async throws -> BenchServer {
        let port = PortBox()
        var configuration = ServerConfiguration(host: "127.0.0.1", port: 0)
        configuration.onServerRunning = { port.set($0) }
        var logger = Logger(label: "bench-server")
        logger.logLevel = .error
        let app = try backend.buildApplication(configuration: configuration, logger: logger)
        let task = Task { try await app.runService() }
        let deadline = ContinuousClock.now + .seconds(30)
        while port.value == nil {
            guard ContinuousClock.now < deadline else {
                task.cancel()
                backend.close()
                throw BenchFailure("server did not start")
            }
            try await Task.sleep(for: .milliseconds(5))
        }
        return BenchServer(port: port.value ?? 0, backend: backend, directory: directory, task: task)
    }

    public var url: String { "ws://127.0.0.1:\(port)" }

    /// A new user's access token.
    public func makeUser(_ name: String) async throws -> String {
        try await accounts.createUser(username: name, password: "bench-\(name)").accessToken
    }

    public func stop() async {
        task.cancel()
        _ = try? await task.value
        backend.close()
        if let directory { try? FileManager.default.removeItem(atPath: directory) }
    }
}

final class PortBox: @unchecked Sendable {
    private let lock = NSLock()
    private var port: Int?
    func set(_ value: Int) { lock.withLock { port = value } }
    var value: Int? { lock.withLock { port } }
}

public struct BenchFailure: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// A fresh path under the temp dir (not created).
public func temporaryPath(_ prefix: String) -> String {
    FileManager.default.temporaryDirectory.appendingPathComponent("\(prefix)-\(UUID().uuidString)").path
}

public let benchAppID = "bench-app"
