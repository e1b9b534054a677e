import ChildProcesses
import Foundation
import Testing

/// Issue 17: `bucketfs history` and `bucketfs restore` on real mounts of the real server.
@Suite("version history: history, restore", .serialized, .timeLimit(.minutes(Patience.testMinutes)))
struct HistoryTests: NoteFiles {
    private func historyJSON(_ cli: CLIHarness, _ path: String) throws -> [String: Any] {
        let result = try cli.bucketfs(["history", path, "--json"])
        #expect(result.status == 0, "history --json failed: \(result.stderr)")
        return try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any])
    }

    private func versions(_ report: [String: Any]) -> [[String: Any]] { report["versions"] as? [[String: Any]] ?? [] }

    /// One note saved five times through mount A; B mounts the same bucket.
    private func editedFiveTimes(_ cli: CLIHarness) throws -> (server: ChildProcess, port: Int, a: String, b: String, data: String) {
        let data = try cli.directory("server")
        let (server, port, token) = try cli.serverWithUser(data: data)
        let a = try cli.directory("a")
        let b = try cli.directory("b")
        try cli.mount(a, port: port, token: token)
        try cli.mount(b, port: port, token: token)
        for (index, text) in ["one", "one two", "one two three", "two three", "two three four"].enumerated() {
            try write(note(text), to: a + "/notes/doc.json")
            try eventually { try version(cli, a + "/notes/doc.json") == index + 1 }
        }
        try eventually { contents(b + "/notes/doc.json") == note("two three four") }
        return (server, port, a, b, data)
    }

    /// A mount point with a long name under the tests' deep state directory: its control
    /// socket's path is cut to fit a socket address (107 bytes), and `bucketfs history` still
    /// reaches the mount through it (before, the mount opened no socket and history had none).
    @Test func aMountPointWithALongNameStillAnswersThroughItsSocket() throws {
        let cli = try CLIHarness()
        let (_, port, token) = try cli.serverWithUser(data: try cli.directory("server"))
        let mount = try cli.directory(String(repeating: "a-long-mount-point-name-", count: 6))
        try cli.mount(mount, port: port, token: token)
        let file = mount + "/notes/doc.json"
        try write(note("one"), to: file)
        try eventually { try version(cli, file) == 1 }
        let report = try historyJSON(cli, file)
        #expect(report["unavailable"] is NSNull || report["unavailable"] == nil, "\(report)")
        #expect(versions(report).map { $0["version"] as? Int } == [1])
    }

    @Test func historyListsFiveVersionsShowsAndDiffsThem() throws {
        let cli = try CLIHarness()
        let (_, _, a, b, _) = try editedFiveTimes(cli)
        let file = a + "/notes/doc.json"

        let report = try historyJSON(cli, file)
        #expect(report["bucket"] as? String == "notes")
        #expect(report["key"] as? String == "doc")
        #expect(report["latestVersion"] as? Int == 5)
        #expect(report["deleted"] as? Bool == false)
        #expect(report["unavailable"] is NSNull || report["unavailable"] == nil)
        let listed = versions(report)
        #expect(listed.map { $0["version"] as? Int } == [1, 2, 3, 4, 5])
        #expect(listed.map { $0["size"] as? Int } == ["one", "one two", "one two three", "two three", "two three four"].map { note($0).utf8.count })
        #expect(listed.map { $0["current"] as? Bool } == [false, false, false, false, true])
        // bucketfs's server says when it accepted each version: in the last minutes.
        for entry in listed {
            let accepted = try #require(entry["acceptedAt"] as? String)
            let date = try #require(ISO8601DateFormatter().date(from: accepted))
            #expect(abs(date.timeIntervalSinceNow) < 300)
        }
        #expect(listed.map { $0["summary"] as? String } == ["created", "content +4 -0", "content +6 -0", "content +0 -4", "content +5 -0"])
        let changes = try #require(listed[1]["changes"] as? [[String: Any]])
        #expect(changes.count == 1)
        #expect(changes.first?["key"] as? String == "content")
        #expect(changes.first?["kind"] as? String == "changed")
        #expect(changes.first?["charactersAdded"] as? Int == 4)

        // Every version's content, as the mount renders it; the same through the other mount.
        for (number, text) in ["one", "one two", "one two three", "two three", "two three four"].enumerated() {
            let shown = try cli.bucketfs(["history", file, "--show", String(number + 1)])
            #expect(shown.status == 0, "\(shown.stderr)")
            #expect(shown.stdout == note(text))
        }
        #expect(try cli.bucketfs(["history", b + "/notes/doc.json", "--show", "3"]).stdout == note("one two three"))
        // Fetching old versions is history, never applied: both files still hold the newest.
        #expect(contents(file) == note("two three four"))
        #expect(contents(b + "/notes/doc.json") == note("two three four"))
        #expect(try version(cli, b + "/notes/doc.json") == 5)

        let text = try cli.bucketfs(["history", file])
        #expect(text.status == 0)
        #expect(text.stdout.hasPrefix("notes/doc.json: 5 versions\n  VERSION  ACCEPTED"), "\(text.stdout)")
        #expect(text.stdout.contains("content +5 -0  (current)"))

        let diff = try cli.bucketfs(["history", file, "--diff", "1", "2"])
        #expect(diff.status == 0, "\(diff.stderr)")
        #expect(diff.stdout == """
            --- doc.json (version 1)
            +++ doc.json (version 2)
            @@ -1,3 +1,3 @@
             {
            -  "content": "one"
            +  "content": "one two"
             }

            """)
        // One version: against the file as it is now.
        let againstNow = try cli.bucketfs(["history", file, "--diff", "4"])
        #expect(againstNow.stdout.contains("+++ doc.json (now)\n"))
        #expect(againstNow.stdout.contains("-  \"content\": \"two three\"\n+  \"content\": \"two three four\"\n"))
        #expect(try cli.bucketfs(["history", file, "--diff", "5"]).stdout == "")

        let never = try cli.bucketfs(["history", a + "/notes/never.json"])
        #expect(never.status == 0, "\(never.stderr)")
        #expect(never.stdout == "notes/never.json: 0 versions\nthe server has no version of it that this mount knows of\n")
        let local = try cli.bucketfs(["history", a + "/notes/.scratch.json"])
        #expect(local.status != 0)
        #expect(local.stderr.contains("is a local-only file"), "\(local.stderr)")

        let missing = try cli.bucketfs(["history", file, "--show", "9"])
        #expect(missing.status != 0)
        #expect(missing.stderr.contains("the server does not keep version 9"), "\(missing.stderr)")
    }

    @Test func restoreMakesANewVersionOnBothMountsAndRefusesOverLocalChanges() throws {
        let cli = try CLIHarness()
        var (server, port, a, b, data) = try editedFiveTimes(cli)
        let file = a + "/notes/doc.json"

        let restored = try cli.bucketfs(["restore", file, "--version", "2"])
        #expect(restored.status == 0, "\(restored.stderr)")
        #expect(restored.stdout.contains("restored \(file) to version 2"))
        try eventually { try version(cli, file) == 6 }
        #expect(contents(file) == note("one two"))
        try eventually { contents(b + "/notes/doc.json") == note("one two") }
        #expect(try version(cli, b + "/notes/doc.json") == 6)
        // Nothing earlier is lost: six versions, the sixth version 2's content.
        let report = try historyJSON(cli, b + "/notes/doc.json")
        #expect(versions(report).map { $0["version"] as? Int } == [1, 2, 3, 4, 5, 6])
        #expect((versions(report).last?["summary"] as? String)?.hasPrefix("content +") == true)
        #expect(try cli.bucketfs(["history", file, "--show", "6"]).stdout == note("one two"))

        // Local changes the server does not have: refused, the file untouched; --force restores.
        cli.stop(server)
        try write(note("unsent"), to: file)
        try eventually { try cli.bucketfs(["status", a]).stdout.contains("pending     1 save") }
        let refused = try cli.bucketfs(["restore", file, "--version", "3"])
        #expect(refused.status != 0)
        #expect(refused.stderr.contains("has local changes the server does not have yet"), "\(refused.stderr)")
        #expect(contents(file) == note("unsent"))
        // Offline, the versions fetched before are what a restore can use.
        let forced = try cli.bucketfs(["restore", file, "--version", "3", "--force"])
        #expect(forced.status == 0, "\(forced.stderr)")
        #expect(contents(file) == note("one two three"))
        (server, _) = try cli.startServer(data: data, port: port)
        try eventually { contents(b + "/notes/doc.json") == note("one two three") }
        try eventually { try version(cli, file) == 7 }
        cli.stop(server)
    }

    @Test func aDeletedNoteIsListedAndRestored() throws {
        let cli = try CLIHarness()
        let (_, _, a, b, _) = try editedFiveTimes(cli)
        try FileManager.default.removeItem(atPath: a + "/notes/doc.json")
        try eventually { !FileManager.default.fileExists(atPath: b + "/notes/doc.json") }

        // From the other mount, which saw the deletion arrive.
        let report = try historyJSON(cli, b + "/notes/doc.json")
        #expect(report["deleted"] as? Bool == true)
        #expect(versions(report).map { $0["version"] as? Int } == [1, 2, 3, 4, 5])
        #expect(versions(report).allSatisfy { $0["current"] as? Bool == false })
        let text = try cli.bucketfs(["history", b + "/notes/doc.json"]).stdout
        #expect(text.contains("notes/doc.json: 5 versions (deleted)"), "\(text)")
        #expect(text.contains("bring it back with: bucketfs restore \(b)/notes/doc.json --version 5"))

        let restored = try cli.bucketfs(["restore", b + "/notes/doc.json", "--version", "4"])
        #expect(restored.status == 0, "\(restored.stderr)")
        try eventually { contents(a + "/notes/doc.json") == note("two three") }
        #expect(contents(b + "/notes/doc.json") == note("two three"))
        // The deletion was version 6; the restore is version 7.
        try eventually { try version(cli, b + "/notes/doc.json") == 7 }
        let after = try historyJSON(cli, a + "/notes/doc.json")
        #expect(after["deleted"] as? Bool == false)
        #expect(versions(after).map { $0["version"] as? Int } == [1, 2, 3, 4, 5, 7])
        #expect(versions(after).last?["summary"] as? String == "(version 6 not available)")
    }

    @Test func historyOfflineListsWhatTheMountFetchedBefore() throws {
        let cli = try CLIHarness()
        let (server, _, a, _, _) = try editedFiveTimes(cli)
        let file = a + "/notes/doc.json"
        // Fetched once while online...
        #expect(versions(try historyJSON(cli, file)).count == 5)
        // ...one more version the mount never fetched...
        try write(note("six"), to: file)
        try eventually { try version(cli, file) == 6 }
        cli.stop(server)

        // ...and offline the five are listed, the sixth said to be unavailable.
        let offline = try historyJSON(cli, file)
        #expect(versions(offline).map { $0["version"] as? Int } == [1, 2, 3, 4, 5])
        #expect(offline["latestVersion"] as? Int == 6)
        let reason = try #require(offline["unavailable"] as? String)
        #expect(reason.contains("the server cannot be reached"), "\(reason)")
        let text = try cli.bucketfs(["history", file])
        #expect(text.status == 0)
        #expect(text.stdout.contains("offline: "), "\(text.stdout)")
        #expect(text.stdout.contains("the rest (of versions up to 6) are unavailable"))
        #expect(try cli.bucketfs(["history", file, "--show", "2"]).stdout == note("one two"))
        let unavailable = try cli.bucketfs(["history", file, "--show", "6"])
        #expect(unavailable.status != 0)
        #expect(unavailable.stderr.contains("version 6 of \(file) is not available offline"), "\(unavailable.stderr)")

        // With the mount stopped, from its store.
        #expect(try cli.bucketfs(["unmount", a]).status == 0)
        let stopped = try historyJSON(cli, file)
        #expect(versions(stopped).count == 5)
        #expect((stopped["unavailable"] as? String)?.contains("is not running") == true)
        let restore = try cli.bucketfs(["restore", file, "--version", "2"])
        #expect(restore.status != 0)
        #expect(restore.stderr.contains("is not running: mount it again to restore"))
    }
}
