import Hummingbird
import Logging

/// The store a `bucketfs serve` or `bucketfs user` runs on: a SQLite data directory (one node)
/// or a PostgreSQL database (any number of nodes).
public enum ServerBackend: Sendable {
    case sqlite(ServerStore)
    case postgres(PostgresServerStore)

    /// Opens `--data DIR` or `--database URL` (exactly one of them), migrating its schema.
    /// `databaseConnections` bounds a database's connection pool; `databaseWait` is how long
    /// to wait for a database that does not answer yet.
    public static func open(
        data: String?, databaseURL: String?, passwordIterations: Int = 200_000,
        databaseConnections: Int = PostgresServerStore.defaultMaximumConnections, databaseWait: Duration = PostgresServerStore.defaultStartWait, logger: Logger
    ) async throws -> ServerBackend {
        let backend: ServerBackend
        if let databaseURL {
            backend = .postgres(try await PostgresServerStore.open(
                PostgresLocation(url: databaseURL), passwordIterations: passwordIterations,
                maximumConnections: databaseConnections, startWait: databaseWait, logger: logger))
        } else {
            guard let data else { throw SyncServerError.dataDirectory(path: "", reason: "no data directory given") }
            backend = .sqlite(try ServerStore(directory: data, passwordIterations: passwordIterations))
        }
        if backend.storage.history.start == .moved {
            logger.notice("\(ServerHistory.movedMessage)", metadata: ["database": "\(backend.location)"])
        }
        return backend
    }

    /// Where the data is, for messages: the SQLite file, or the database URL without password.
    public var location: String {
        switch self {
        case .sqlite(let store): return store.databasePath
        case .postgres(let store): return store.location.description
        }
    }

    /// Users and tokens.
    public var accounts: any ServerAccounts {
        switch self {
        case .sqlite(let store): return store
        case .postgres(let store): return store
        }
    }

    var storage: any ServerStorage {
        switch self {
        case .sqlite(let store): return store
        case .postgres(let store): return store
        }
    }

    /// The sync server over this store (see `buildServerApplication`).
    public func buildApplication(configuration: ServerConfiguration, logger: Logger) throws -> some ApplicationProtocol {
        try buildServerApplication(configuration: configuration, storage: storage, logger: logger)
    }

    /// Releases the database connections (PostgreSQL); the SQLite file closes with its store.
    public func close() {
        if case .postgres(let store) = self { store.close() }
    }
}
