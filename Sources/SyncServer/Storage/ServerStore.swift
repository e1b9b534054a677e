import Foundation
import GRDB

/// The server's durable state in one SQLite file (WAL): users, tokens, buckets, entities with
/// their recent versions, the change log and applied ccids. Safe to share between tasks.
public final class ServerStore: Sendable {
    /// The file name of the database inside the data directory.
    public static let databaseFileName = "bucketfs-server.sqlite"

    /// The data directory.
    public let directory: String
    let pool: DatabasePool
    let passwordHasher: PasswordHasher
    /// Where password hashing runs: one at a time, off the cooperative pool.
    let hashingQueue = HashingQueue()
    /// Changes waiting for the next group commit (see `CommitQueue`).
    let commitQueue = CommitQueue()
    /// Runs each committed batch's completions (acknowledgements, broadcasts) in commit order,
    /// while the writer goes on with the next batch.
    let completionQueue = DispatchQueue(label: "bucketfs-server.completions")
    /// The Apptimist service's file locks: in memory, as the one node on this file owns them.
    let apptimistLocks = ApptimistFileLocks()

    /// Opens (creating if needed) the store in `directory` and migrates its schema.
    /// - Parameter passwordIterations: PBKDF2 rounds for new passwords (existing ones keep theirs).
    public init(directory: String, passwordIterations: Int = 200_000) throws {
        let url = URL(fileURLWithPath: directory, isDirectory: true)
        do {
            try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        } catch {
            throw SyncServerError.dataDirectory(path: directory, reason: "\(error)")
        }
        var configuration = Configuration()
        configuration.foreignKeysEnabled = true
        // `bucketfs user add` may run beside a live server: wait for its writes instead of failing.
        configuration.busyMode = .timeout(10)
        configuration.label = "bucketfs-server"
        configuration.prepareDatabase { db in
            // WAL + NORMAL is durable across process crashes; FULL also survives power loss,
            // which the server promises before it broadcasts a change.
            try db.execute(sql: "PRAGMA synchronous = FULL")
        }
        self.directory = url.path
        self.pool = try DatabasePool(path: url.appendingPathComponent(Self.databaseFileName).path, configuration: configuration)
        self.passwordHasher = PasswordHasher(iterations: max(1, passwordIterations))
        try ServerSchema.migrator.migrate(pool)
    }

    /// The path of the SQLite file.
    public var databasePath: String { pool.path }
}

/// One node owns the file: every change is its own, so there are no foreign changes to deliver.
extension ServerStore: ServerStorage {
    func checkReadable() async throws {
        _ = try await pool.read { db in try Int.fetchOne(db, sql: "SELECT 1") }
    }

    func deliverForeignChanges(to publish: @escaping @Sendable (_ bucketID: Int64, _ change: StoredChange) -> Void) {}

    func observeDatabase(_ observer: @escaping @Sendable (DatabaseEvent) -> Void) {}
}
