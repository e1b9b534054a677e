import ArgumentParser
import Foundation

/// `bucketfs watch`: a live feed of changes, because inotify cannot see changes made elsewhere.
struct Watch: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print one line per change to a mount's files, local or remote, as they happen.",
        discussion: """
            Each line: time, bucket/key, version, who (local: saved through this mount; remote: \
            arrived from the server, with the client id that made it) and kind (created, changed, \
            removed). inotify cannot report \
            changes that arrive from the server; editors can poll instead (vim: set autoread + \
            :checktime, emacs: auto-revert-mode). Stop with Ctrl-C.
            """
    )

    @Argument(help: "A mount point (default: every running mount).")
    var mountpoint: String?

    @Flag(help: "Print each change as one JSON object per line.")
    var json = false

    @Flag(help: "Print the changes already in the feed first.")
    var history = false

    func run() async throws {
        var feeds: [String]
        if let mountpoint {
            let path = Paths.absolute(mountpoint)
            guard MountRecord.load(path: MountRecord.path(for: path)) != nil else {
                throw CommandError("bucketfs has never mounted \(path)")
            }
            feeds = [MountRecord.feedPath(for: path)]
        } else {
            feeds = MountRecord.all().filter(\.isRunning).map { MountRecord.feedPath(for: $0.mountpoint) }
            guard !feeds.isEmpty else { throw CommandError("no bucketfs mount is running") }
        }
        var offsets: [String: UInt64] = [:]
        for feed in feeds {
            offsets[feed] = history ? 0 : (try? FileManager.default.attributesOfItem(atPath: feed)[.size] as? UInt64) ?? 0
        }
        while !Task.isCancelled {
            for feed in feeds {
                guard let handle = FileHandle(forReadingAtPath: feed) else { continue }
                defer { try? handle.close() }
                let offset = offsets[feed] ?? 0
                try handle.seek(toOffset: offset)
                guard let data = try handle.readToEnd(), let lastNewline = data.lastIndex(of: UInt8(ascii: "\n")) else { continue }
                let complete = data[data.startIndex...lastNewline]
                offsets[feed] = offset + UInt64(complete.count)
                for line in complete.split(separator: UInt8(ascii: "\n")) {
                    // Unbuffered, so a pipe (`bucketfs watch | ...`) sees each change at once.
                    FileHandle.standardOutput.write(Data(((json ? String(decoding: line, as: UTF8.self) : Self.text(line)) + "\n").utf8))
                }
            }
            try await Task.sleep(for: .milliseconds(100))
        }
    }

    static func text(_ line: Data.SubSequence) -> String {
        guard let event = try? JSONDecoder.bucketfs.decode(FeedEvent.self, from: Data(line)) else {
            return String(decoding: line, as: UTF8.self)
        }
        let formatter = DateFormatter()
        formatter.dateFormat = "HH:mm:ss"
        let version = event.version.map { "v\($0)" } ?? "-"
        let who = event.client.map { "\(event.origin) (\($0))" } ?? event.origin
        return "\(formatter.string(from: event.time))  \(event.bucket)/\(event.key)  \(version)  \(who)  \(event.kind)"
    }
}
