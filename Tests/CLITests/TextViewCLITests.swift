import Foundation
import Testing

/// Issue 19: notes as plain text, through the real binary: `--text-field` and its options, the
/// config file's `text`, and `ls`, `watch` and `status` naming notes by their title.
@Suite("notes as plain text", .serialized, .timeLimit(.minutes(Patience.testMinutes)))
struct TextViewCLITests {
    static func write(_ path: String, _ text: String) throws {
        try Data(text.utf8).write(to: URL(fileURLWithPath: path))
    }

    static func jsonObject(_ path: String) -> [String: Any]? {
        guard let data = FileManager.default.contents(atPath: path) else { return nil }
        return (try? JSONSerialization.jsonObject(with: data)) as? [String: Any]
    }

    @Test func aTextMountBesideAJSONMountOfTheSameNotes() throws {
        let cli = try CLIHarness()
        let (server, port, token) = try cli.serverWithUser(data: try cli.directory("server"))
        defer { cli.stop(server) }
        let json = try cli.directory("json")
        let textMount = try cli.directory("text")
        let template = cli.path("template.json")
        try Self.write(template, "{\"tags\": [], \"systemTags\": [], \"deleted\": false}\n")
        try cli.mount(json, port: port, token: token)
        try cli.mount(
            textMount, port: port, token: token,
            options: ["--text-field", "notes:content", "--touch", "modificationDate", "--trash-field", "deleted", "--template", template])

        // A note made elsewhere, keyed by a UUID as Simplenote does.
        let key = "0b7c3f1e-8d2a-4c55-9e61-2f4a7d9c1b00"
        try Self.write(json + "/notes/\(key).json", "{\"content\": \"Groceries\\nmilk\\n\", \"deleted\": false, \"tags\": [\"home\", \"weekly\"]}\n")
        try eventually { (try? String(contentsOfFile: textMount + "/notes/\(key).txt", encoding: .utf8)) == "Groceries\nmilk\n" }
        let listed = try cli.bucketfs(["ls", textMount + "/notes"])
        #expect(listed.status == 0, "\(listed.stderr)")
        #expect(listed.stdout == "\(key).txt\tGroceries\thome weekly\n")

        // watch names the note by its title.
        let (watch, output) = try cli.start(["watch", textMount])
        defer { cli.stop(watch) }
        Thread.sleep(forTimeInterval: 0.5)
        try Self.write(textMount + "/notes/\(key).txt", "Groceries\nmilk\neggs\n")
        try eventually { text(of: output).contains("notes/\(key)  \"Groceries\"") }
        try eventually { (Self.jsonObject(json + "/notes/\(key).json")?["content"] as? String) == "Groceries\nmilk\neggs\n" }
        let edited = try #require(Self.jsonObject(json + "/notes/\(key).json"))
        #expect(edited["tags"] as? [String] == ["home", "weekly"])
        #expect(edited["modificationDate"] is NSNumber)

        // A new file: the template's fields, the text, the time. Removing it trashes the note.
        try Self.write(textMount + "/notes/Todo.txt", "Todo\n- call Bob\n")
        try eventually { (Self.jsonObject(json + "/notes/Todo.json")?["content"] as? String) == "Todo\n- call Bob\n" }
        let created = try #require(Self.jsonObject(json + "/notes/Todo.json"))
        #expect(created["systemTags"] as? [String] == [])
        #expect(created["deleted"] as? Bool == false)
        try FileManager.default.removeItem(atPath: textMount + "/notes/Todo.txt")
        try eventually { (Self.jsonObject(json + "/notes/Todo.json")?["deleted"] as? Bool) == true }
        #expect(try FileManager.default.contentsOfDirectory(atPath: textMount + "/notes") == ["\(key).txt"])

        // Bytes that are not UTF-8 stay here; status says which note, by its title.
        try Data([0x47, 0xFF, 0x0A]).write(to: URL(fileURLWithPath: textMount + "/notes/\(key).txt"))
        let status = try cli.bucketfs(["status", textMount])
        #expect(status.stdout.contains("notes/\(key).txt \"Groceries\"  invalid: not UTF-8"), "\(status.stdout)")
        #expect((Self.jsonObject(json + "/notes/\(key).json")?["content"] as? String) == "Groceries\nmilk\neggs\n")

        #expect(try cli.bucketfs(["unmount", textMount]).status == 0)
        #expect(try cli.bucketfs(["unmount", json]).status == 0)
    }

    @Test func theConfigFileGivesAMountItsTextViewAndTheDemoShowsItsNotesAsText() throws {
        let cli = try CLIHarness()
        let mountpoint = try cli.directory("demo")
        try FileManager.default.createDirectory(atPath: cli.path("config/bucketfs"), withIntermediateDirectories: true)
        try Self.write(
            cli.path("config/bucketfs/config.json"),
            "{\"mounts\": {\"\(mountpoint)\": {\"text\": {\"notes\": {\"field\": \"content\", \"extension\": \"md\"}}}}}\n")
        let mounted = try cli.bucketfs(["mount", mountpoint])
        #expect(mounted.status == 0, "\(mounted.stderr)")
        defer { _ = try? cli.bucketfs(["unmount", mountpoint]) }
        let notes = try FileManager.default.contentsOfDirectory(atPath: mountpoint + "/notes").sorted()
        #expect(notes == ["ideas.md", "shopping-list.md", "welcome.md"])
        #expect(try String(contentsOfFile: mountpoint + "/notes/shopping-list.md", encoding: .utf8) == "Shopping\n\n- oat milk\n- coffee\n- apples\n")
        let listed = try cli.bucketfs(["ls", mountpoint + "/notes"])
        #expect(listed.stdout.split(separator: "\n").contains("welcome.md\tWelcome to bucketfs\tbucketfs"), "\(listed.stdout)")

        #expect(try cli.bucketfs(["unmount", mountpoint]).status == 0)

        // An option that needs a text view, without one, is a clear error.
        let plain = try cli.directory("plain")
        let refused = try cli.bucketfs([
            "mount", plain, "--server", "ws://127.0.0.1:9", "--app-id", "test-app", "--token", "t", "--bucket", "notes",
            "--touch", "modificationDate",
        ])
        #expect(refused.status != 0)
        #expect(refused.stderr.contains("--touch goes with a text view"), "\(refused.stderr)")
    }
}
