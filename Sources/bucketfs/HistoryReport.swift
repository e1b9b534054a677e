import BucketFS
import Foundation
import SyncStore

/// `bucketfs history`'s list, as text and as JSON.
struct HistoryReport: Codable {
    struct Version: Codable {
        var version: Int
        /// When the server accepted it; null when the server does not say.
        var acceptedAt: Date?
        /// Bytes of the file as the mount shows this version.
        var size: Int
        /// Whether this is the version the file holds now (as far as this mount knows).
        var current: Bool
        /// What changed from the version before; null when that version is not available.
        var changes: [VersionChanges.Field]?
        var summary: String
    }

    var file: String
    var bucket: String
    var key: String
    /// The newest version the mount knows of (null: the note never reached the server).
    var latestVersion: Int?
    /// The note has no file now; a version can be restored.
    var deleted: Bool
    /// Why the server could not be asked; null when the list is what the server keeps.
    var unavailable: String?
    var versions: [Version]

    init(_ history: EntityHistory) {
        file = history.file.path
        bucket = history.file.bucket
        key = history.file.key
        latestVersion = history.latestVersion
        deleted = history.isDeleted
        unavailable = history.unavailable
        var previous: EntityVersion?
        versions = history.versions.compactMap { version in
            defer { previous = version }
            guard let data = version.data else { return nil }
            let changes: VersionChanges?
            let summary: String
            if let before = previous?.data, previous?.version == version.version - 1 {
                changes = VersionChanges(from: before, to: data)
                summary = changes?.summary ?? ""
            } else if version.version == 1 {
                changes = VersionChanges(from: [:], to: data)
                summary = "created"
            } else {
                changes = nil
                summary = "(version \(version.version - 1) not available)"
            }
            return Version(
                version: version.version, acceptedAt: version.acceptedAt, size: EntityHistory.rendered(data).utf8.count,
                current: !history.isDeleted && version.version == history.entity?.version, changes: changes?.fields,
                summary: summary)
        }
    }

    var text: String {
        let name = "\(FileNameCodec.encode(bucket))/\((file as NSString).lastPathComponent)"
        var lines: [String] = []
        let count = versions.count
        lines.append("\(name): \(count) version\(count == 1 ? "" : "s")" + (deleted ? " (deleted)" : ""))
        if !versions.isEmpty {
            let sizeWidth = max(4, versions.map { String($0.size).count }.max() ?? 0)
            lines.append("  VERSION  ACCEPTED             \(String(repeating: " ", count: sizeWidth - 4))SIZE  CHANGES")
            for version in versions {
                let number = String(version.version)
                let size = String(version.size)
                let accepted = version.acceptedAt.map(MountReport.time) ?? "-"
                lines.append(
                    "  \(String(repeating: " ", count: max(0, 7 - number.count)))\(number)  "
                        + accepted.padding(toLength: 19, withPad: " ", startingAt: 0) + "  "
                        + "\(String(repeating: " ", count: sizeWidth - size.count))\(size)  \(version.summary)"
                        + (version.current ? "  (current)" : ""))
            }
        }
        if let unavailable {
            let upTo = latestVersion.map { " (of versions up to \($0))" } ?? ""
            lines.append("offline: \(unavailable)")
            lines.append("  listed: the versions this mount fetched before; the rest\(upTo) are unavailable until it can ask the server")
        } else if latestVersion == nil {
            lines.append("the server has no version of it that this mount knows of")
        }
        if deleted, let last = versions.last {
            lines.append("deleted: bring it back with: bucketfs restore \(file) --version \(last.version)")
        }
        return lines.joined(separator: "\n") + "\n"
    }
}
