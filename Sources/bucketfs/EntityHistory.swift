import Foundation
import JSONDiff
import SyncStore

/// What is known of a note's versions: those the mount fetched from the server (now, if it can
/// ask, and before), and the note's state in the store.
struct EntityHistory {
    let file: MountedFile
    /// Fetched versions, oldest first.
    let versions: [EntityVersion]
    /// The newest server version the mount knows of the note.
    let latestVersion: Int?
    /// Why the server could not be asked now (nil: it was, and `versions` is all it keeps).
    let unavailable: String?
    let entity: EntityInfo?

    /// Asks the running mount to fetch what the server keeps, then reads the store.
    static func load(_ file: MountedFile) throws -> EntityHistory {
        let fetched = file.fetchHistory()
        let store = try CommandError.context("cannot open the store \(file.record.store)") {
            try SyncStore(path: file.record.store)
        }
        defer { try? store.close() }
        return try CommandError.context("cannot read the store \(file.record.store)") {
            let reply = try? fetched.get()
            let unavailable: String? = if case .failure(let error) = fetched { error.description } else { nil }
            return EntityHistory(
                file: file, versions: try store.cachedVersions(bucket: file.bucket, key: file.key),
                latestVersion: try reply?.latestVersion ?? HistoryFetcher.latestVersion(store, bucket: file.bucket, key: file.key),
                unavailable: unavailable, entity: try store.entity(bucket: file.bucket, key: file.key))
        }
    }

    /// The note has no file: deleted (on the server, or here with the removal still pending).
    var isDeleted: Bool { latestVersion != nil && (entity == nil || entity?.deletedPending == true) }

    /// Version `number`, or an error saying why it cannot be had.
    func version(_ number: Int) throws -> EntityVersion {
        if let found = versions.first(where: { $0.version == number }) { return found }
        if let unavailable {
            throw CommandError("version \(number) of \(file.path) is not available offline (\(unavailable)); fetched so far: \(listed)")
        }
        throw CommandError("the server does not keep version \(number) of \(file.path); it keeps: \(listed)")
    }

    /// `1-3, 5` or `none`.
    var listed: String {
        guard !versions.isEmpty else { return "none" }
        var runs: [ClosedRange<Int>] = []
        for number in versions.map(\.version) {
            if let last = runs.last, last.upperBound + 1 == number {
                runs[runs.count - 1] = last.lowerBound...number
            } else {
                runs.append(number...number)
            }
        }
        return runs.map { $0.count == 1 ? "\($0.lowerBound)" : "\($0.lowerBound)-\($0.upperBound)" }.joined(separator: ", ")
    }

    /// A version's data as the mount shows it (pretty JSON, the file's exact bytes).
    static func rendered(_ data: JSONObject) -> String {
        JSONValue.object(data).prettyRendered()
    }

    /// What the note's file holds now: the file's own bytes through a running mount, else the
    /// store's; nil when it has no file.
    func currentText() -> String? {
        if file.record.isRunning, let data = FileManager.default.contents(atPath: file.path) {
            return String(decoding: data, as: UTF8.self)
        }
        guard let entity, !isDeleted else { return nil }
        return String(decoding: entity.content, as: UTF8.self)
    }
}
