import Foundation

/// The built `bucketfs` executable: the tests drive the real command, never library calls.
enum Binary {
    struct Missing: Error, CustomStringConvertible {
        let searched: [String]
        var description: String {
            "the bucketfs executable is missing (looked at \(searched.joined(separator: ", "))): "
                + "build it first with `swift build --product bucketfs`, or set BUCKETFS_BINARY"
        }
    }

    /// `$BUCKETFS_BINARY`, else `bucketfs` in the build products directory that holds this test
    /// bundle (`.build/<triple>/debug`), else `.build/debug/bucketfs` of the package this file is in.
    static func path() throws -> String {
        var candidates: [String] = []
        if let explicit = ProcessInfo.processInfo.environment["BUCKETFS_BINARY"], !explicit.isEmpty {
            candidates.append(explicit)
        }
        for executable in [Bundle.main.executablePath, "/proc/self/exe"].compactMap({ $0 }) {
            let resolved = URL(fileURLWithPath: executable).resolvingSymlinksInPath()
            candidates.append(resolved.deletingLastPathComponent().appendingPathComponent("bucketfs").path)
        }
        let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        candidates.append(packageRoot.appendingPathComponent(".build/debug/bucketfs").path)
        if let found = candidates.first(where: { FileManager.default.isExecutableFile(atPath: $0) }) {
            return found
        }
        throw Missing(searched: candidates)
    }
}
