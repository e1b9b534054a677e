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
        var readers: [String: FeedReader] = [:]
        for feed in feeds {
            guard let reader = FeedReader(path: feed, fromStart: history) else { continue }
            if history, let previous = FeedFile(path: FeedWriter.previousPath(of: feed)) {
                _ = printLines(of: previous, from: 0)
            }
            readers[feed] = reader
        }
        while !Task.isCancelled {
            for feed in feeds {
                // A feed the mount had not written yet when the watch began: all of it is new.
                if readers[feed] == nil { readers[feed] = FeedReader(path: feed, fromStart: true) }
                readers[feed]?.poll(printLines)
            }
            try await Task.sleep(for: .milliseconds(100))
        }
    }

    /// A feed file, open: what is read is the file whose inode was looked at, and an inode held
    /// open cannot be reused by a newer file.
    private struct FeedFile {
        let handle: FileHandle
        let inode: UInt64

        init?(path: String) {
            guard let handle = FileHandle(forReadingAtPath: path) else { return nil }
            var status = stat()
            guard fstat(handle.fileDescriptor, &status) == 0 else { return nil }
            self.handle = handle
            inode = UInt64(status.st_ino)
        }
    }

    /// Follows one mount's feed, through the new files the mount starts when one grows too big.
    private final class FeedReader {
        let path: String
        private var file: FeedFile
        private var offset: UInt64

        init?(path: String, fromStart: Bool) {
            guard let file = FeedFile(path: path) else { return nil }
            self.path = path
            self.file = file
            offset = fromStart ? 0 : ((try? file.handle.seekToEnd()) ?? 0)
        }

        /// Prints what was added since the last poll.
        func poll(_ printLines: (FeedFile, UInt64) -> UInt64) {
            var status = stat()
            guard stat(path, &status) == 0, UInt64(status.st_ino) != file.inode else {
                offset = printLines(file, offset)
                return
            }
            // The mount set the file aside (it writes nothing more to it) and started another:
            // the rest of this one, the full one set aside after it if any, then the new one.
            _ = printLines(file, offset)
            let previousPath = FeedWriter.previousPath(of: path)
            if let previous = FeedFile(path: previousPath), previous.inode != file.inode, previous.inode != UInt64(status.st_ino) {
                _ = printLines(previous, 0)
            }
            guard let next = FeedFile(path: path) else { return }
            file = next
            offset = printLines(file, 0)
        }
    }

    /// Prints the complete lines after `offset`; returns the offset after the last one.
    private func printLines(of file: FeedFile, from offset: UInt64) -> UInt64 {
        guard (try? file.handle.seek(toOffset: offset)) != nil, let data = try? file.handle.readToEnd(),
            let lastNewline = data.lastIndex(of: UInt8(ascii: "\n"))
        else { return offset }
        let complete = data[data.startIndex...lastNewline]
        for line in complete.split(separator: UInt8(ascii: "\n")) {
            // Unbuffered, so a pipe (`bucketfs watch | ...`) sees each change at once.
            FileHandle.standardOutput.write(Data(((json ? String(decoding: line, as: UTF8.self) : Self.text(line)) + "\n").utf8))
        }
        return offset + UInt64(complete.count)
    }

    static func text(_ line: Data.SubSequence) -> String {
        guard let event = try? JSONDecoder.bucketfs.decode(FeedEvent.self, from: Data(line)) else {
            return String(decoding: line, as: UTF8.self)
        }
        let formatter = DateFormatter()
        formatter.dateFormat = "HH:mm:ss"
        let version = event.version.map { "v\($0)" } ?? "-"
        let who = event.client.map { "\(event.origin) (\($0))" } ?? event.origin
        let title = event.title.map { "  \"\($0)\"" } ?? ""
        return "\(formatter.string(from: event.time))  \(event.bucket)/\(event.key)\(title)  \(version)  \(who)  \(event.kind)"
    }
}
