import Foundation
import Logging
import ServiceLifecycle
import SyncServer

/// The sync server `bucketfs mount` starts in-process when no --server is given, so that a fresh
/// machine works with no account anywhere. It listens on loopback only, on a free port.
struct EmbeddedServer {
    static let appID = "bucketfs-demo"
    static let username = "demo@bucketfs.local"

    let url: String
    let token: String
    /// True when this run created the server's data: the caller seeds the sample notes.
    let isNew: Bool
    let group: ServiceGroup
    let task: Task<Void, any Error>

    static func start(dataDirectory: String, logger: Logger) async throws -> EmbeddedServer {
        try Paths.createDirectory(dataDirectory)
        let isNew = !FileManager.default.fileExists(atPath: dataDirectory + "/" + ServerStore.databaseFileName)
        let store = try ServerStore(directory: dataDirectory)
        if isNew {
            // Nobody logs in with this password: the mount asks the store for a token directly.
            let password = (0..<4).map { _ in UUID().uuidString }.joined()
            _ = try await store.createUser(username: username, password: password)
        }
        let token = try await store.issueToken(username: username).accessToken

        let (ports, portSink) = AsyncStream<Int>.makeStream()
        let configuration = ServerConfiguration(
            host: "127.0.0.1", port: 0, appIDs: [appID],
            onServerRunning: { port in portSink.yield(port) }
        )
        let app = try buildServerApplication(configuration: configuration, store: store, logger: logger)
        // Signals belong to the mount (it unmounts first); the server stops when told to.
        let group = ServiceGroup(services: [app], gracefulShutdownSignals: [], logger: logger)
        let task = Task { try await group.run() }
        var iterator = ports.makeAsyncIterator()
        guard let port = await iterator.next() else {
            task.cancel()
            throw CommandError("the embedded sync server did not start")
        }
        return EmbeddedServer(url: "ws://localhost:\(port)", token: token, isNew: isNew, group: group, task: task)
    }

    func stop() async {
        await group.triggerGracefulShutdown()
        _ = await task.result
    }
}
