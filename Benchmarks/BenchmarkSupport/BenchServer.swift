import Foundation
import Hummingbird
import Logging
import SyncServer

/// The real sync server on 127.0.0.1 (port 0) over a real SQLite file in a fresh temp dir.
public final class BenchServer: Sendable {
    public let port: Int
    public let store: ServerStore
    private let directory: String
    private let task: Task<Void, any Error>

    private init(port: Int, store: ServerStore, directory: String, task: Task<Void, any Error>) {
        self.port = port
        self.store = store
        self.directory = directory
        self.task = task
    }

    public static func start() async throws -> BenchServer {
        let directory = temporaryPath("bucketfs-bench-server")
        // Production settings except the password KDF cost, which only slows user creation.
        let store = try ServerStore(directory: directory, passwordIterations: 1_000)
        let port = PortBox()
        var configuration = ServerConfiguration(host: "127.0.0.1", port: 0)
        configuration.onServerRunning = { port.set($0) }
        var logger = Logger(label: "bench-server")
        logger.logLevel = .error
        let app = try buildServerApplication(configuration: configuration, store: store, logger: logger)
        let task = Task { try await app.runService() }
        let deadline = ContinuousClock.now + .seconds(30)
        while port.value == nil {
            guard ContinuousClock.now < deadline else {
                task.cancel()
                throw BenchFailure("server did not start")
            }
            try await Task.sleep(for: .milliseconds(5))
        }
        return BenchServer(port: port.value ?? 0, store: store, directory: directory, task: task)
    }

    public var url: String { "ws://127.0.0.1:\(port)" }

    /// A new user's access token.
    public func makeUser(_ name: String) async throws -> String {
        try await store.createUser(username: name, password: "bench-\(name)").accessToken
    }

    public func stop() async {
        task.cancel()
        _ = try? await task.value
        try? FileManager.default.removeItem(atPath: directory)
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
