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
    /// The history this file serves (a copy of it begins another: `ServerHistory`).
    let history: ServerHistory

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
        let origin = try ServerHistory.fileOrigin(path: pool.path)
        self.history = try pool.write { db in
            let row = try Row.fetchOne(db, sql: "SELECT history, history_origin, last_cv FROM server_state WHERE id = 1")
            let history = ServerHistory.establish(
                recordedNumber: row?["history"], recordedOrigin: row?["history_origin"], origin: origin,
                hasChanges: (row?["last_cv"] as Int64? ?? 0) > 0)
            if history.start != .continued {
                try db.execute(
                    sql: "UPDATE server_state SET history = ?, history_origin = ? WHERE id = 1", arguments: [history.storedNumber, origin])
            }
            return history
        }
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
