import Foundation
import GRDB
import JSONDiff
@testable import SyncStore

/// A fresh directory under the system temp dir, removed by `cleanup()`.
struct TemporaryDirectory {
    let path: String

    init() throws {
        let base = FileManager.default.temporaryDirectory.appendingPathComponent("syncstore-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: base, withIntermediateDirectories: true)
        path = base.path
    }

    var storePath: String { path + "/store.sqlite" }

    func cleanup() {
        try? FileManager.default.removeItem(atPath: path)
    }
}

/// Opens a store in a fresh directory with one bucket "notes", runs `body`, cleans up.
func withStore(_ body: (SyncStore, TemporaryDirectory) throws -> Void) throws {
    let directory = try TemporaryDirectory()
    defer { directory.cleanup() }
    let store = try SyncStore(path: directory.storePath)
    _ = try store.ensureBucket("notes")
    try body(store, directory)
    try store.close()
}

func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

func object(_ text: String) -> JSONObject {
    (try? JSONValue(parsing: text))?.objectValue ?? ["unparseable": .string(text)]
}

/// The wire diff from `a` to `b`, as a server would broadcast it.
func wireDiff(_ a: JSONObject, _ b: JSONObject) -> JSONObject {
    JSONDiffing.encode(JSONDiffing.diff(from: a, to: b)).objectValue ?? [:]
}

/// Puts an entity at a server version into the store, as an index page with data does.
@discardableResult
func seed(_ store: SyncStore, key: String, version: Int, data: JSONObject) throws -> RemoteOutcome {
    try store.applyIndexPage(bucket: "notes", entries: [IndexEntry(key: key, version: version, data: data)], current: nil, isLast: false)
}

/// The server's version 2 of `key` (`base` at version 1 before it), through one of the store's
/// three entry points for server data: `applyRemote` (a change), `applyEntity` (an `e`
/// answer) or `applyIndexPage`.
@discardableResult
func applyVersion2(_ store: SyncStore, through entryPoint: String, key: String, from base: JSONObject, to remote: JSONObject) throws
    -> RemoteOutcome
{
    switch entryPoint {
    case "applyRemote":
        return try store.applyRemote(
            bucket: "notes",
            changes: [RemoteChange(key: key, operation: .modify(diff: wireDiff(base, remote)), sourceVersion: 1, endVersion: 2, cv: "c2")])
    case "applyEntity":
        return try store.applyEntity(bucket: "notes", key: key, version: 2, data: remote)
    default:
        return try store.applyIndexPage(bucket: "notes", entries: [IndexEntry(key: key, version: 2, data: remote)], current: nil, isLast: false)
    }
}

/// Writes a store as a build from before `migration`'s successor left it: the schema up to
/// `migration`, then `sql` (its rows). The next `SyncStore` opened there migrates it.
func writeStoreFromBefore(
    _ migration: String, at directory: TemporaryDirectory, _ sql: String, arguments: StatementArguments = StatementArguments()
) throws {
    let old = try DatabaseQueue(path: directory.storePath)
    try Schema.migrator.migrate(old, upTo: migration)
    try old.write { db in try db.execute(sql: sql, arguments: arguments) }
}
