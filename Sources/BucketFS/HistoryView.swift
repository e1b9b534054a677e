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
