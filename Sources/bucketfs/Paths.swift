import Foundation
import BucketFS

/// Where bucketfs keeps its files, following the XDG base directory rules.
enum Paths {
    private static var environment: [String: String] { ProcessInfo.processInfo.environment }
    private static var home: String { environment["HOME"] ?? NSHomeDirectory() }

    /// `$XDG_DATA_HOME/bucketfs` (default `~/.local/share/bucketfs`): stores and the demo server.
    static var dataDirectory: String {
        (environment["XDG_DATA_HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? home + "/.local/share") + "/bucketfs"
    }

    /// `$XDG_STATE_HOME/bucketfs` (default `~/.local/state/bucketfs`): logs and pid files of mounts.
    static var stateDirectory: String {
        (environment["XDG_STATE_HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? home + "/.local/state") + "/bucketfs"
    }

    /// The absolute, symlink-free form of a path given on the command line.
    static func absolute(_ path: String) -> String {
        let url = URL(fileURLWithPath: path, relativeTo: URL(fileURLWithPath: FileManager.default.currentDirectoryPath))
        return url.standardizedFileURL.resolvingSymlinksInPath().path
    }

    /// A short stable name for a mount point, used to name its store, log and pid files.
    /// `atMost`: the most bytes the name may have, the mount point's part cut to fit (a Unix
    /// socket's whole path must fit in 107 bytes); the hash keeps names apart whatever is cut.
    static func mountName(for mountpoint: String, atMost limit: Int = .max) -> String {
        let readable = mountpoint.split(separator: "/").last.map(String.init) ?? "root"
        var safe = String(readable.unicodeScalars.map { CharacterSet.alphanumerics.contains($0) ? Character($0) : "_" })
        let hash = "-\(fnv1a(mountpoint))"
        while !safe.isEmpty && safe.utf8.count + hash.utf8.count > limit { safe.removeLast() }
        return safe + hash
    }

    static func pidFile(for mountpoint: String) -> String { stateDirectory + "/\(mountName(for: mountpoint)).pid" }
    static func logFile(for mountpoint: String) -> String { stateDirectory + "/\(mountName(for: mountpoint)).log" }

    static func createDirectory(_ path: String) throws {
        do {
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        } catch {
            throw CommandError("cannot create \(path): \(error.localizedDescription)")
        }
    }

    /// FNV-1a, 64 bit, as 16 hex digits: stable across runs and platforms (unlike Hasher).
    private static func fnv1a(_ text: String) -> String {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in text.utf8 {
            hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01b3
        }
        let hex = String(hash, radix: 16)
        return String(repeating: "0", count: 16 - hex.count) + hex
    }
}

/// Whether `path` is a mount point right now, from /proc/self/mountinfo (fields are octal-escaped).
func isMounted(_ path: String) -> Bool {
    guard let table = ProcFile.text("/proc/self/mounts") else { return false }
    let escaped = path.replacingOccurrences(of: "\\", with: "\\134").replacingOccurrences(of: " ", with: "\\040")
        .replacingOccurrences(of: "\t", with: "\\011").replacingOccurrences(of: "\n", with: "\\012")
    return table.split(separator: "\n").contains { $0.split(separator: " ").dropFirst().first == Substring(escaped) }
}
