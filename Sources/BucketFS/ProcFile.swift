import Foundation

/// Files under /proc, read whole. Their size is 0 to stat(2), and Foundation's
/// `String(contentsOfFile:)` then reads one 4 KiB page: /proc/self/mounts on a machine with a few
/// dozen mounts (containers, snaps, other FUSE mounts) is longer, and a mount listed past it was
/// never found (`bucketfs mount` waited its 60 s for a mount that was there).
public enum ProcFile {
    /// The whole text of `path`, read to its end; nil when it cannot be read.
    public static func text(_ path: String) -> String? {
        guard let handle = FileHandle(forReadingAtPath: path) else { return nil }
        defer { try? handle.close() }
        guard let data = try? handle.readToEnd() else { return nil }
        return String(decoding: data, as: UTF8.self)
    }
}
