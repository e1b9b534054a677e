import ChildProcesses
import Foundation
import Glibc
import Testing

/// Issue 17: the read-only view `DIR/.history/<bucket>/<key>/<version>.json` of
/// `bucketfs mount --history`, on real mounts of the real server.
@Suite("version history: the .history view", .serialized, .timeLimit(.minutes(Patience.testMinutes)))
struct HistoryViewTests: NoteFiles {
    private func listing(_ path: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []).sorted()
    }

    /// The errno a system call failed with; 0 when it succeeded.
    private func failure(_ call: () -> Int32) -> Int32 {
        errno = 0
        let result = call()
        if result >= 0 { return 0 }
        return errno
    }

    private func mode(_ path: String) -> mode_t? {
        var attributes = stat()
        guard stat(path, &attributes) == 0 else { return nil }
        return attributes.st_mode
    }

    private let texts = ["one", "one two", "one two three"]

    /// Mount A with `--history`, B without, both of one bucket; `doc` saved three times through A.
    private func editedThreeTimes(_ cli: CLIHarness) throws -> (server: ChildProcess, port: Int, token: String, a: String, b: String, data: String) {
        let data = try cli.directory("server")
        let (server, port, token) = try cli.serverWithUser(data: data)
        let a = try cli.directory("a")
        let b = try cli.directory("b")
        try cli.mount(a, port: port, token: token, options: ["--history"])
        try cli.mount(b, port: port, token: token)
        for (index, text) in texts.enumerated() {
            try write(note(text), to: a + "/notes/doc.json")
            try eventually { try version(cli, a + "/notes/doc.json") == index + 1 }
        }
        try eventually { contents(b + "/notes/doc.json") == note("one two three") }
        return (server, port, token, a, b, data)
    }

    @Test func versionsAreFilesThatCannotBeChangedAndOnlyWithTheOption() throws {
        let cli = try CLIHarness()
        let (server, _, _, a, b, _) = try editedThreeTimes(cli)
        defer { cli.stop(server) }

        // Without --history there is no view: grep -r sees each note once.
        #expect(listing(b) == ["notes"])
        #expect(!FileManager.default.fileExists(atPath: b + "/.history"))
        #expect(failure { mkdir(b + "/.history", 0o755) } != 0)
        let once = try cli.run(["/usr/bin/grep", "-rl", "content", b], timeout: 30)
        #expect(once.stdout == b + "/notes/doc.json\n", "\(once.stdout)")

        // With it: .history/<bucket>/<key>/<version>.json, listed at the root.
        let view = a + "/.history"
        #expect(listing(a) == [".history", "notes"])
        #expect(listing(view) == ["notes"])
        #expect(listing(view + "/notes") == ["doc"])
        let versions = view + "/notes/doc"
        #expect(listing(versions) == ["1.json", "2.json", "3.json"])
        for (index, text) in texts.enumerated() {
            let file = versions + "/\(index + 1).json"
            #expect(contents(file) == note(text))
            let size = try FileManager.default.attributesOfItem(atPath: file)[.size] as? Int
            #expect(size == note(text).utf8.count)
            #expect(mode(file) == S_IFREG | 0o444)
        }
        #expect(mode(view) == S_IFDIR | 0o555)
        #expect(mode(versions) == S_IFDIR | 0o555)
        // Fetching versions changes nothing: the note is still the newest.
        #expect(contents(a + "/notes/doc.json") == note("one two three"))
        // grep -r over a mount with the view sees the versions too.
        let all = try cli.run(["/usr/bin/grep", "-rl", "content", a], timeout: 30)
        #expect(all.stdout.split(separator: "\n").count == 4, "\(all.stdout)")

        // Read-only: every change answers EROFS (and the files stay as they were).
        let first = versions + "/1.json"
        #expect(failure { open(first, O_WRONLY) } == EROFS)
        #expect(failure { open(first, O_RDWR | O_TRUNC) } == EROFS)
        #expect(failure { open(versions + "/new.json", O_WRONLY | O_CREAT, 0o644) } == EROFS)
        #expect(failure { unlink(first) } == EROFS)
        #expect(failure { rename(first, versions + "/9.json") } == EROFS)
        #expect(failure { rename(first, a + "/notes/copy.json") } == EROFS)
        #expect(failure { rename(a + "/notes/doc.json", versions + "/9.json") } == EROFS)
        #expect(failure { mkdir(versions + "/sub", 0o755) } == EROFS)
        #expect(failure { rmdir(versions) } == EROFS)
        #expect(failure { rmdir(view) } == EROFS)
        #expect(failure { chmod(first, 0o644) } == EROFS)
        let attribute = try cli.run(["/usr/bin/setfattr", "-n", "user.test", "-v", "x", first], timeout: 30)
        #expect(attribute.stderr.contains("Read-only file system"), "\(attribute.stderr)")
        let shell = try cli.run(["/bin/sh", "-c", "echo x > \(first)"], timeout: 30)
        #expect(shell.status != 0)
        #expect(shell.stderr.contains("Read-only file system"), "\(shell.stderr)")
        #expect(contents(first) == note("one"))
        #expect(listing(versions) == ["1.json", "2.json", "3.json"])
        #expect(!FileManager.default.fileExists(atPath: a + "/notes/copy.json"))

        // A version made since (here through the other mount) is fetched when looked up...
        try write(note("four"), to: b + "/notes/doc.json")
        try eventually { try version(cli, a + "/notes/doc.json") == 4 }
        #expect(contents(versions + "/4.json") == note("four"))
        #expect(listing(versions) == ["1.json", "2.json", "3.json", "4.json"])
        // ...a version the server never had is not there.
        #expect(failure { open(versions + "/9.json", O_RDONLY) } == ENOENT)
        #expect(failure { open(versions + "/01.json", O_RDONLY) } == ENOENT)

        // A deleted note keeps its versions in the view.
        try write(note("short-lived"), to: a + "/notes/gone.json")
        try eventually { try version(cli, a + "/notes/gone.json") == 1 }
        try FileManager.default.removeItem(atPath: a + "/notes/gone.json")
        try eventually { !FileManager.default.fileExists(atPath: b + "/notes/gone.json") }
        #expect(listing(view + "/notes") == ["doc", "gone"])
        #expect(contents(view + "/notes/gone/1.json") == note("short-lived"))
    }

    @Test func fetchedVersionsReadOfflineAndAfterARemount() throws {
        let cli = try CLIHarness()
        let (server, port, token, a, _, data) = try editedThreeTimes(cli)
        let versions = a + "/.history/notes/doc"
        // Listed (and so fetched) while online...
        #expect(listing(versions) == ["1.json", "2.json", "3.json"])
        // ...then a version the mount never fetched, and the server goes.
        try write(note("four"), to: a + "/notes/doc.json")
        try eventually { try version(cli, a + "/notes/doc.json") == 4 }
        cli.stop(server)
        try eventually { try cli.bucketfs(["status", a]).stdout.contains("connection  offline") }

        #expect(listing(versions) == ["1.json", "2.json", "3.json"])
        #expect(contents(versions + "/2.json") == note("one two"))
        // Not fetched before: unavailable offline, an I/O error (and a log line), not "missing".
        #expect(failure { open(versions + "/4.json", O_RDONLY) } == EIO)
        let logs = cli.path("state") + "/bucketfs"
        let logged = ((try? FileManager.default.contentsOfDirectory(atPath: logs)) ?? []).filter { $0.hasSuffix(".log") }
            .map { contents(logs + "/" + $0) ?? "" }.joined()
        #expect(logged.contains("history: a version that was not fetched before is unavailable"), "\(logged.suffix(2000))")
        // One the server never had is missing, offline too.
        #expect(failure { open(versions + "/9.json", O_RDONLY) } == ENOENT)

        // From the store after a remount, still offline.
        #expect(try cli.bucketfs(["unmount", a]).status == 0)
        try cli.mount(a, port: port, token: token, options: ["--history"])
        #expect(listing(versions) == ["1.json", "2.json", "3.json"])
        #expect(contents(versions + "/3.json") == note("one two three"))

        // Back online, the missing version is fetched.
        let (restarted, _) = try cli.startServer(data: data, port: port)
        defer { cli.stop(restarted) }
        try eventually { contents(versions + "/4.json") == note("four") }
    }
}
