import ArgumentParser
import BucketFS
import Foundation
import SyncProtocol
import SyncStore

/// `bucketfs status`: what each mount is doing and what needs the user's attention.
struct Status: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show mounts: connection, buckets, pending saves and files that need attention.",
        discussion: """
            Works while a mount runs and after it stopped (it then reads the mount's store). \
            Files that need attention: invalid JSON (kept locally, not sent until it parses), \
            changes the server rejected (with its error code), and merged conflicts.
            """
    )

    @Argument(help: "A mount point (default: every mount bucketfs knows of).")
    var mountpoint: String?

    @Flag(help: "Print JSON for scripts.")
    var json = false

    func run() async throws {
        let records = try MountRecord.records(for: mountpoint)
        let reports = records.map(MountReport.init(record:))
        if json {
            let encoder = JSONEncoder.bucketfs
            encoder.outputFormatting = [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes]
            let status = StatusJSON(version: BuildInfo.version, commit: BuildInfo.commit, mounts: reports)
            print(String(decoding: try encoder.encode(status), as: UTF8.self))
        } else if reports.isEmpty {
            print("No bucketfs mounts. Mount with: bucketfs mount DIR")
        } else {
            print(reports.map(\.text).joined(separator: "\n"))
        }
    }
}

/// `status --json`: which bucketfs answers (scripts and bug reports), and each mount.
struct StatusJSON: Codable {
    var version: String
    var commit: String
    var mounts: [MountReport]
}

/// One mount's status, from its record and its store.
struct MountReport: Codable {
    struct Bucket: Codable {
        var name: String
        var entities: Int
        var cv: String?
        /// The last time the server was found to have lost changes of this mount (a restore).
        var serverLoss: ServerLoss?
    }

    struct Attention: Codable {
        var bucket: String
        var key: String
        var file: String
        var state: String
        var reason: String?
        var advice: String
        /// The note's title (first line), in a bucket shown as plain text.
        var title: String? = nil
    }

    var mountpoint: String
    var running: Bool
    var pid: Int32?
    /// The server the mount is on (or last tried); with several, all of them and its place among them.
    var server: String
    var servers: [String]?
    var serverPosition: Int?
    var appID: String
    var store: String
    var connection: MountRecord.Connection
    var buckets: [Bucket] = []
    var pendingSaves = 0
    /// Files with a change the server has not acknowledged yet (`bucket/file`).
    var pendingFiles: [String] = []
    var attention: [Attention] = []
    var storeError: String?

    init(record: MountRecord) {
        running = record.isRunning
        mountpoint = record.mountpoint
        pid = running ? record.pid : nil
        server = record.server
        servers = record.servers
        serverPosition = record.serverPosition
        appID = record.appID
        store = record.store
        connection = running ? record.connection : .init(state: "not mounted")
        do {
            // Saves the mount has journaled and not yet moved into its store (it does within
            // milliseconds, but a command run right after a save can be quicker): not on the
            // server either. The journal is read first, so an edit moved meanwhile shows in the
            // store's figures read after it.
            let journaled = try SaveJournal.recorded(atPath: SaveJournal.path(besideStore: record.store))
            let store = try SyncStore(path: record.store)
            defer { try? store.close() }
            let applied = try store.appliedJournalSequence()
            let notInStore = journaled.filter { $0.sequence > applied }.count
            var localOnly: [Attention] = []
            var names = EntityNames(store: store)
            for bucket in try store.buckets() {
                var entities = 0
                for entry in try store.entries(bucket: bucket.name) {
                    switch entry.name {
                    case .entity: entities += 1
                    case .localFile(let name):
                        let fileExtension = names.format(of: bucket.name).fileExtension
                        if let item = Self.attention(localFile: name, bucket: bucket.name, extension: fileExtension) { localOnly.append(item) }
                    }
                }
                buckets.append(Bucket(name: bucket.name, entities: entities, cv: bucket.cv, serverLoss: try store.serverLoss(bucket: bucket.name)))
            }
            let stats = try store.stats()
            // A change held back for a reload is a save waiting too: `bucketfs sync` waits for it.
            pendingSaves = stats.queuedChanges + stats.sentChanges + stats.changesAwaitingReload + stats.savesParsedLater + notInStore
            let unsynced = try store.unsyncedEntities()
            pendingFiles = unsynced.filter(\.awaitsServer).map { entity in
                let title = names.title(bucket: entity.bucket, value: entity.value ?? entity.ghost).map { " \"\($0)\"" } ?? ""
                return "\(entity.bucket)/\(names.fileName(bucket: entity.bucket, key: entity.key))\(title)"
            }
            attention = unsynced.compactMap { Self.attention($0, names: &names) } + localOnly
        } catch {
            storeError = "\(error)"
        }
    }

    private static func attention(_ entity: EntityInfo, names: inout EntityNames) -> Attention? {
        let advice: String
        let fileExtension = names.format(of: entity.bucket).fileExtension
        switch entity.state {
        case .synced, .pending: return nil
        case .invalid where fileExtension != "json":
            advice = "the text view keeps this file here: write UTF-8 text (or, for a field that is no text, edit it in the JSON view)"
        case .invalid: advice = "fix the JSON; the file syncs once it parses as an object"
        case .conflict: advice = "both edits were kept as well as they could be merged; check the file"
        case .rejected(let code):
            switch code {
            case 413: advice = "too large to sync: make the document smaller; the next save tries again"
            case 400 where !EntityKey.isValid(entity.key):
                advice = "the server takes no key with characters other than letters, digits and . _ % @ -: "
                    + "rename the file, e.g. to \(FileNameCodec.plainFileName(forKey: entity.key, extension: fileExtension)) (any other "
                    + "characters are sent escaped)"
            // Refused by the server, or by the engine before sending (a Telepat immutable field): the reason says which.
            case 400: advice = "the change was refused as invalid (the reason above says why); edit the file to retry"
            case 401: advice = "the token was refused: mount again with a fresh --token or --user"
            default: advice = "the server refused the change (\(code)); edit the file to retry"
            }
        }
        return Attention(
            bucket: entity.bucket, key: entity.key, file: "\(entity.bucket)/\(names.fileName(bucket: entity.bucket, key: entity.key))",
            state: entity.state.description, reason: entity.reason, advice: advice,
            title: names.title(bucket: entity.bucket, value: entity.value ?? entity.ghost))
    }

    /// A `*.json` file that never syncs because of its name (`My Note.json`).
    private static func attention(localFile name: String, bucket: String, extension fileExtension: String) -> Attention? {
        guard let stem = FileNameCodec.localJSONStem(name, extension: fileExtension) else { return nil }
        return Attention(
            bucket: bucket, key: stem, file: "\(bucket)/\(name)", state: "local",
            reason: "the name has a % that is no escape of a key, so it is never sent",
            advice: "rename it without the %, e.g. \(FileNameCodec.plainFileName(for: stem, extension: fileExtension)), to sync it")
    }

    var text: String {
        var lines = ["\(mountpoint)  \(running ? "mounted (pid \(pid ?? 0))" : "not mounted")"]
        // An Apptimist mount has no app id (its service is in the URL).
        let app = appID.isEmpty ? "" : " (app \(appID))"
        lines.append("  server      \(MountRecord.describe(server: server, servers: servers, position: serverPosition))\(app)")
        var connectionLine = "  connection  \(connection.state)"
        if let since = connection.since { connectionLine += " since \(Self.time(since))" }
        if let retryAt = connection.retryAt {
            connectionLine += ", retrying in \(max(0, Int(retryAt.timeIntervalSinceNow.rounded(.up)))) s"
        }
        if let reason = connection.reason { connectionLine += " (\(reason))" }
        lines.append(connectionLine)
        lines.append("  store       \(store)")
        if let storeError { lines.append("  store error \(storeError)") }
        for bucket in buckets {
            var line = "  bucket      \(bucket.name): \(bucket.entities) entities"
            if let loss = bucket.serverLoss {
                let when = Self.time(Date(timeIntervalSince1970: Double(loss.detectedAt) / 1e9))
                line += "; at \(when) the server had lost \(loss.notes) note\(loss.notes == 1 ? "" : "s")' changes "
                    + "(restored from a backup?): sent again"
            }
            lines.append(line)
        }
        lines.append("  pending     \(pendingSaves) save\(pendingSaves == 1 ? "" : "s") waiting for the server")
        if attention.isEmpty {
            lines.append("  attention   nothing needs attention")
        } else {
            lines.append("  attention   \(attention.count) file\(attention.count == 1 ? "" : "s"):")
            for item in attention {
                let title = item.title.map { " \"\($0)\"" } ?? ""
                lines.append("    \(item.file)\(title)  \(item.state)\(item.reason.map { ": \($0)" } ?? "")")
                lines.append("      -> \(item.advice)")
            }
        }
        return lines.joined(separator: "\n")
    }

    /// A local time as the commands print it (`2026-11-25 13:52:28`).
    static func time(_ date: Date) -> String {
        let formatter = DateFormatter()
        formatter.dateFormat = "yyyy-MM-dd HH:mm:ss"
        return formatter.string(from: date)
    }
}
