import Foundation

/// Files of `{"content": text}` notes on a mount, as the history tests write and read them.
protocol NoteFiles {}

extension NoteFiles {
    /// The file as the mount renders `{"content": text}`.
    func note(_ text: String) -> String { "{\n  \"content\": \"\(text)\"\n}\n" }

    func write(_ text: String, to path: String) throws {
        try Data(text.utf8).write(to: URL(fileURLWithPath: path))
    }

    func contents(_ path: String) -> String? {
        FileManager.default.contents(atPath: path).map { String(decoding: $0, as: UTF8.self) }
    }

    /// The server version the mount shows for a file (xattr `user.bucketfs.version`).
    func version(_ cli: CLIHarness, _ path: String) throws -> Int? {
        let result = try cli.run(["/usr/bin/getfattr", "--only-values", "-n", "user.bucketfs.version", path], timeout: 30)
        return Int(result.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
    }
}
