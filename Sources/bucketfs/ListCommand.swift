import ArgumentParser
import BucketFS
import Foundation
import SyncStore

/// `bucketfs ls DIR/BUCKET`: find a note by what it says, when its file is named by a UUID.
struct List: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ls",
        abstract: "List a bucket's files with each one's title and tags (for notes whose keys are UUIDs).",
        discussion: """
            One line per file: the file name, the title (the first line of the text, in a bucket \
            shown as plain text with --text-field) and the tags (the `tags` field), separated by \
            tabs. Works while the mount runs and after it stopped (it reads the mount's store).
            """
    )

    @Argument(help: "A bucket directory of a mount (DIR/BUCKET), or a mount point for every bucket.")
    var path: String

    @Flag(help: "Print JSON for scripts.")
    var json = false

    struct Line: Codable {
        var bucket: String
        var key: String
        var file: String
        var title: String?
        var tags: [String]
    }

    func run() async throws {
        let path = Paths.absolute(self.path)
        let (record, bucket) = try Self.mount(of: path)
        let store: SyncStore
        do { store = try SyncStore(path: record.store) } catch { throw CommandError("cannot open the store \(record.store): \(error)") }
        defer { try? store.close() }
        let buckets = try bucket.map { [$0] } ?? store.buckets().map(\.name)
        var names = EntityNames(store: store)
        var lines: [Line] = []
        for bucket in buckets {
            let entries: [DirectoryEntry]
            do { entries = try store.entries(bucket: bucket) } catch { throw CommandError("no bucket \(bucket) in \(record.mountpoint)") }
            for entry in entries {
                guard case .entity(let key) = entry.name else { continue }
                let value = try store.entity(bucket: bucket, key: key)?.value
                lines.append(Line(
                    bucket: bucket, key: key, file: names.fileName(bucket: bucket, key: key),
                    title: names.title(bucket: bucket, value: value), tags: EntityNames.tags(of: value)))
            }
        }
        if json {
            let encoder = JSONEncoder.bucketfs
            encoder.outputFormatting = [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes]
            print(String(decoding: try encoder.encode(lines), as: UTF8.self))
            return
        }
        for line in lines {
            let file = buckets.count > 1 ? "\(line.bucket)/\(line.file)" : line.file
            print([file, line.title ?? "", line.tags.joined(separator: " ")].joined(separator: "\t"))
        }
    }

    /// The mount `path` is in, and the bucket it names (nil: the mount point itself).
    private static func mount(of path: String) throws -> (MountRecord, String?) {
        if let record = MountRecord.load(path: MountRecord.path(for: path)) { return (record, nil) }
        let parent = (path as NSString).deletingLastPathComponent
        guard let record = MountRecord.load(path: MountRecord.path(for: parent)) else {
            throw CommandError("\(path) is no bucket of a bucketfs mount (give DIR/BUCKET)")
        }
        let directory = (path as NSString).lastPathComponent
        guard let bucket = FileNameCodec.decode(directory) else { throw CommandError("\(directory) is no bucket's directory name") }
        return (record, bucket)
    }
}
