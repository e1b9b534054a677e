import BenchmarkSupport
import Foundation
import GRDB
import JSONDiff
import Logging
import SyncClient
import SyncStore

/// One first sync: a fresh store and client load the whole bucket from the server.
struct FirstSyncRun {
    let duration: Duration
    let entities: Int
    var entitiesPerSecond: Double { Double(entities) / duration.seconds }
}

func runFirstSync(server: BenchServer, token: String, bucket: String, expected: Int, pageLimit: Int) async throws -> FirstSyncRun {
    let directory = temporaryPath("bucketfs-sync-bench-client")
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let store = try SyncStore(path: directory + "/store.sqlite")
    defer { try? store.close() }
    var configuration = SyncClientConfiguration(
        serverURL: server.url, appID: benchAppID, buckets: [bucket], clientID: "first-sync-\(UUID().uuidString.prefix(8))"
    ) { token }
    configuration.indexPageLimit = pageLimit
    var logger = Logger(label: "sync-bench-client")
    logger.logLevel = .error
    let client = try SyncClient(configuration: configuration, store: store, logger: logger)
    let progress = client.progress()
    let start = ContinuousClock.now
    await client.start()
    let ready = Task {
        for await update in progress where update.bucket == bucket && update.isReady { return true }
        return false
    }
    let watchdog = Task {
        try await Task.sleep(for: .seconds(300))
        ready.cancel()
    }
    let finished = await ready.value
    let duration = ContinuousClock.now - start
    watchdog.cancel()
    await client.stop()
    guard finished else { throw BenchFailure("first sync did not finish within 300 s") }
    let stored = try store.stats().entities
    guard stored == expected else { throw BenchFailure("first sync stored \(stored) entities, expected \(expected)") }
    return FirstSyncRun(duration: duration, entities: stored)
}

/// The floor for storing the same rows: a bare SQLite insert loop (one transaction, one
/// prepared statement, WAL + synchronous=FULL like the store) of key, version and the
/// already-rendered compact JSON, nothing else.
func runSQLiteBaseline(rows: [(key: String, data: String)]) throws -> FirstSyncRun {
    let directory = temporaryPath("bucketfs-sync-bench-sqlite")
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: directory) }
    var configuration = Configuration()
    configuration.prepareDatabase { db in try db.execute(sql: "PRAGMA synchronous = FULL") }
    let pool = try DatabasePool(path: directory + "/baseline.sqlite", configuration: configuration)
    try pool.write { db in
        try db.execute(sql: "CREATE TABLE entity (id INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE, version INTEGER NOT NULL, data TEXT NOT NULL)")
    }
    let start = ContinuousClock.now
    try pool.write { db in
        let insert = try db.makeStatement(sql: "INSERT INTO entity (key, version, data) VALUES (?, 1, ?)")
        for row in rows { try insert.execute(arguments: [row.key, row.data]) }
    }
    let duration = ContinuousClock.now - start
    try pool.close()
    return FirstSyncRun(duration: duration, entities: rows.count)
}

extension Duration {
    var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
    var microseconds: Int { Int(seconds * 1e6) }
}
