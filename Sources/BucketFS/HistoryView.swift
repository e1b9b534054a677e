/// A place in the read-only `.history` view: `.history/<bucket>/<key>/<version>.json`.
public enum HistoryPath: Hashable, Sendable {
    case root
    case bucket(String)
    case entity(bucket: String, key: String)
    case version(bucket: String, key: String, version: Int)

    /// The view's directory at the mount root.
    static let rootName = ".history"

    var isDirectory: Bool {
        if case .version = self { return false }
        return true
    }

    /// A version's file name: `<version>.json`.
    static func fileName(forVersion version: Int) -> String { "\(version).json" }

    /// The version a file name in an entity's directory stands for (canonical numbers only).
    static func version(fromFileName name: String) -> Int? {
        guard name.hasSuffix(".json") else { return nil }
        let digits = String(name.dropLast(5))
        guard let version = Int(digits), version > 0, String(version) == digits else { return nil }
        return version
    }
}

/// Inode numbers of the view's nodes. The store gives it none (nothing of it is stored), so they
/// come from a range it never reaches, below the lock links' (`FileSystemState.nextSymlinkInode`),
/// and a path keeps its number for the mount's life, so a kernel's cached entry stays right.
struct HistoryInodes: Sendable {
    private var numbers: [HistoryPath: UInt64] = [:]
    private var next: UInt64 = 1 << 61

    mutating func number(for path: HistoryPath) -> UInt64 {
        if let number = numbers[path] { return number }
        let number = next
        next += 1
        numbers[path] = number
        return number
    }
}
