import Foundation
import Testing

/// Issue 19: one mount shows the notes as plain text (`--text-field content`), another as JSON,
/// both of the same user on one `bucketfs serve`.
@Suite(.serialized, .timeLimit(.minutes(Patience.testMinutes)))
struct TextViewTwoMountTests {
    /// The note's fields in the JSON mount's file, once they hold `content`.
    static func waitForJSON(_ path: String, content: String, seconds: Double = Patience.seconds) throws -> [String: Any]? {
        var object: [String: Any]?
        _ = eventually(seconds) {
            guard let text = try? Files.read(path),
                let parsed = (try? JSONSerialization.jsonObject(with: Data(text.utf8))) as? [String: Any]
            else { return false }
            object = parsed
            return parsed["content"] as? String == content
        }
        return object
    }

    @Test func vimOnTheTextAndAnEditOfTheJSONAtTheSameTimeMerge() throws {
        let sandbox = try Sandbox()
        defer { sandbox.close() }
        let server = try ServerProcess.start(in: sandbox)
        let a = try MountProcess(sandbox, at: "a", server: server, extra: ["--text-field", "content", "--touch", "modificationDate"])
        let b = try MountProcess(sandbox, at: "b", server: server, token: try server.newToken(in: sandbox))

        try Files.write(b.path("notes/n.json"), "{\"content\": \"line one\\nline two\\n\", \"tags\": [\"x\"]}\n")
        #expect(try Files.waitFor(a.path("notes/n.txt"), toHold: "line one\nline two\n") == "line one\nline two\n")
        #expect(eventually { TwoMountTests.state(of: b.path("notes/n.json")) == "synced" })
        #expect(eventually { TwoMountTests.state(of: a.path("notes/n.txt")) == "synced" })

        // The server pauses, so neither edit can see the other: both are made against the same
        // version, and the server merges them when it goes on.
        server.process.signal(SIGSTOP)
        try Command.shell("vim -u NONE -es -c '%s/line one/line ONE/' -c 'wq' n.txt", in: a.path("notes"))
        try Command.python(
            """
            import json
            note = json.load(open('n.json'))
            note['content'] = note['content'].replace('line two\\n', 'line two\\nline three\\n')
            note['tags'].append('y')
            open('n.json', 'w').write(json.dumps(note, indent=2, sort_keys=True) + '\\n')
            """, in: b.path("notes"))
        Thread.sleep(forTimeInterval: 0.5)
        server.process.signal(SIGCONT)

        let merged = "line ONE\nline two\nline three\n"
        #expect(try Files.waitFor(a.path("notes/n.txt"), toHold: merged) == merged)
        let note = try #require(try Self.waitForJSON(b.path("notes/n.json"), content: merged))
        #expect(note["tags"] as? [String] == ["x", "y"])
        #expect(note["modificationDate"] is NSNumber)
        #expect(try FileManager.default.contentsOfDirectory(atPath: a.path("notes")).filter { !$0.hasSuffix("~") } == ["n.txt"])

        // kill -9 right after a save: the save is kept, and sent after the next mount.
        try Files.write(a.path("notes/n.txt"), merged + "line four\n")
        a.process.signal(SIGKILL)
        #expect(a.process.waitForExit())
        try a.remount()
        _ = try #require(try Self.waitForJSON(b.path("notes/n.json"), content: merged + "line four\n"))
        #expect(try Files.read(a.path("notes/n.txt")) == merged + "line four\n")
    }
}
