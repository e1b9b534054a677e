import BucketFS
import Foundation
import JSONDiff
import SyncStore
import Testing

/// A bucket mounted with a text view (`TextFieldFormat`): one string field per file, every
/// other field kept unseen; the contract of the JSON view holds (README, "Notes as plain text").
@Suite(.serialized, .timeLimit(.minutes(Patience.testMinutes)))
struct TextViewTests {
    static let note: JSONObject = [
        "content": "Shopping\n\n- milk\n", "tags": .array(["home"]), "deleted": false, "modificationDate": .double(1.5),
    ]

    /// A mount of `notes` in a text view, holding `note` as version 1 on the server under `k`.
    static func mount(_ format: TextFieldFormat = TextFieldFormat(field: "content")) throws -> MountFixture {
        let mount = try MountFixture(formats: ["notes": format])
        try seed(mount, "k", note)
        return mount
    }

    /// An entity the server has at version 1 (as an index page brings it).
    static func seed(_ mount: MountFixture, _ key: String, _ data: JSONObject) throws {
        _ = try mount.store.applyIndexPage(
            bucket: "notes", entries: [IndexEntry(key: key, version: 1, data: data)], current: nil, isLast: false)
    }

    static func state(_ path: String, in mount: MountFixture) throws -> String {
        try Tool.python("import os; print(os.getxattr('\(path)', 'user.bucketfs.state').decode())", in: mount.mountPoint)
            .stdout.trimmingCharacters(in: .newlines)
    }

    /// The one change queued for `key`: its diff (nil if none is queued, or it is a removal).
    static func queuedDiff(_ mount: MountFixture, _ key: String = "k") throws -> JSONObject? {
        guard let change = try mount.store.outgoingChanges(bucket: "notes").first(where: { $0.key == key }),
            case .modify(let diff) = change.operation
        else { return nil }
        return diff
    }

    @Test func theFileIsTheFieldsTextAndASaveSendsATextDeltaOfItOnly() throws {
        let mount = try Self.mount()
        defer { mount.close() }
        let dir = mount.path("notes")
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir) == ["k.txt"])
        #expect(try Tool.run("/bin/cat", ["k.txt"], directory: dir).stdout == "Shopping\n\n- milk\n")
        #expect(try Tool.shell("stat -c %s k.txt", in: dir).stdout == "17\n")

        try Tool.shell("printf 'Shopping\\n\\n- oat \"milk\"\\n' > k.txt", in: dir)
        #expect(try Tool.run("/bin/cat", ["k.txt"], directory: dir).stdout == "Shopping\n\n- oat \"milk\"\n")
        var expected = Self.note
        expected["content"] = "Shopping\n\n- oat \"milk\"\n"
        #expect(try mount.store.entity(bucket: "notes", key: "k")?.value == expected)
        let diff = try #require(try Self.queuedDiff(mount))
        #expect(Array(diff.keys) == ["content"])
        #expect(diff["content"]?.objectValue?["o"] == "d")
        #expect(try Self.state("notes/k.txt", in: mount) == "pending")
    }

    @Test func touchStampsTheSaveTimeInSeconds() throws {
        let mount = try Self.mount(TextFieldFormat(field: "content", touchField: "modificationDate"))
        defer { mount.close() }
        let before = Date().timeIntervalSince1970
        try Tool.shell("printf 'Shopping\\n\\n- bread\\n' > k.txt", in: mount.path("notes"))
        let after = Date().timeIntervalSince1970
        let value = try #require(try mount.store.entity(bucket: "notes", key: "k")?.value)
        let stamped = try #require(value["modificationDate"]?.doubleValue)
        #expect(stamped >= before.rounded(.down) && stamped <= after + 1)
        let diff = try #require(try Self.queuedDiff(mount))
        #expect(Set(diff.keys) == ["content", "modificationDate"])
        #expect(diff["content"]?.objectValue?["o"] == "d")
    }

    @Test func aNewFileGetsTheTemplatesOtherFields() throws {
        let template: JSONObject = ["tags": .array([]), "deleted": false, "systemTags": .array(["markdown"])]
        let mount = try Self.mount(TextFieldFormat(field: "content", fileExtension: "md", touchField: "modificationDate", template: template))
        defer { mount.close() }
        let dir = mount.path("notes")
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir) == ["k.md"])
        try Tool.shell("printf '# Ideas\\n' > ideas.md", in: dir)
        let value = try #require(try mount.store.entity(bucket: "notes", key: "ideas")?.value)
        #expect(value["content"] == "# Ideas\n")
        #expect(value["tags"] == .array([]))
        #expect(value["systemTags"] == .array(["markdown"]))
        #expect(value["deleted"] == false)
        #expect(value["modificationDate"]?.doubleValue != nil)
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir).sorted() == ["ideas.md", "k.md"])
        // An empty new file is no note yet: nothing is sent until it holds text.
        try Tool.shell("touch later.md", in: dir)
        #expect(try Self.state("notes/later.md", in: mount) == "invalid")
        #expect(try mount.store.outgoingChanges(bucket: "notes").map(\.key).sorted() == ["ideas"])
        try Tool.shell("printf 'Later\\n' >> later.md", in: dir)
        #expect(try mount.store.entity(bucket: "notes", key: "later")?.value?["content"] == "Later\n")
        #expect(try mount.store.outgoingChanges(bucket: "notes").map(\.key).sorted() == ["ideas", "later"])
        // Names that are not the view's stay local files, as in the JSON view.
        try Tool.shell("printf '{}' > other.json", in: dir)
        #expect(try mount.store.entity(bucket: "notes", key: "other") == nil)
    }

    @Test func removingTheFileRemovesTheEntity() throws {
        let mount = try Self.mount()
        defer { mount.close() }
        try Tool.shell("rm k.txt", in: mount.path("notes"))
        #expect(try FileManager.default.contentsOfDirectory(atPath: mount.path("notes")) == [])
        #expect(try mount.store.entity(bucket: "notes", key: "k")?.deletedPending == true)
        #expect(try mount.store.outgoingChanges(bucket: "notes").map(\.operation) == [.remove])
    }

    @Test func withATrashFieldRemovingTheFileTrashesTheNoteAndWritingItAgainRestoresIt() throws {
        let mount = try Self.mount(TextFieldFormat(field: "content", trashField: "deleted"))
        defer { mount.close() }
        let dir = mount.path("notes")
        try Tool.shell("rm k.txt", in: dir)
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir) == [])
        #expect(try Tool.shell("cat k.txt", in: dir, expectSuccess: false).status != 0)
        var trashed = Self.note
        trashed["deleted"] = true
        let entity = try #require(try mount.store.entity(bucket: "notes", key: "k"))
        #expect(entity.value == trashed)
        #expect(entity.deletedPending == false)
        let diff = try #require(try Self.queuedDiff(mount))
        #expect(Array(diff.keys) == ["deleted"])

        // Trashed notes stay hidden after a remount too; a file made again under the key
        // takes the note out of the trash, its other fields kept.
        try mount.remount()
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir) == [])
        try Tool.shell("printf 'Back\\n' > k.txt", in: dir)
        var restored = Self.note
        restored["content"] = "Back\n"
        #expect(try mount.store.entity(bucket: "notes", key: "k")?.value == restored)
        #expect(try Tool.run("/bin/cat", ["k.txt"], directory: dir).stdout == "Back\n")
    }

    @Test func vimSavesThroughItsBackupWithoutLosingOtherFieldsOrTrashingTheNote() throws {
        let mount = try Self.mount(TextFieldFormat(field: "content", touchField: "modificationDate", trashField: "deleted"))
        defer { mount.close() }
        let dir = mount.path("notes")
        // backupcopy=no: vim renames the file to k.txt~ and writes a new k.txt, the pattern
        // that would lose the other fields if a new file started from nothing.
        try Tool.shell("vim -u NONE -es -c 'set backup backupcopy=no' -c '%s/milk/oat milk/' -c 'wq' k.txt", in: dir)
        #expect(try Tool.run("/bin/cat", ["k.txt"], directory: dir).stdout == "Shopping\n\n- oat milk\n")
        let value = try #require(try mount.store.entity(bucket: "notes", key: "k")?.value)
        #expect(value["content"] == "Shopping\n\n- oat milk\n")
        #expect(value["tags"] == .array(["home"]))
        #expect(value["deleted"] == false)
        let diff = try #require(try Self.queuedDiff(mount))
        #expect(Set(diff.keys) == ["content", "modificationDate"])
        #expect(diff["content"]?.objectValue?["o"] == "d")
        // vim's default (backupcopy=auto, writebackup) as well.
        try Tool.shell("vim -u NONE -es -c '%s/oat/soy/' -c 'wq' k.txt", in: dir)
        #expect(try mount.store.entity(bucket: "notes", key: "k")?.value?["content"] == "Shopping\n\n- soy milk\n")
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir).filter { $0 != "k.txt~" } == ["k.txt"])
    }

    @Test func fieldsThatAreNoTextShowEmptyAndReadOnly() throws {
        let mount = try Self.mount()
        defer { mount.close() }
        try Self.seed(mount, "number", ["content": 42, "tags": .array([])])
        try Self.seed(mount, "nothing", ["title": "no content"])
        let dir = mount.path("notes")
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir).sorted() == ["k.txt", "nothing.txt", "number.txt"])
        #expect(try Tool.shell("stat -c '%s %a' number.txt nothing.txt k.txt", in: dir).stdout == "0 444\n0 444\n17 644\n")
        #expect(try Self.state("notes/number.txt", in: mount) == "readonly:not-a-string")
        #expect(try Self.state("notes/nothing.txt", in: mount) == "readonly:missing")
        // grep -r reads them all without an error.
        let grep = try Tool.shell("grep -r milk .", in: dir)
        #expect(grep.stdout == "./k.txt:- milk\n")
        #expect(grep.stderr.isEmpty)

        // A write is kept here, marked invalid, never sent; the value is untouched.
        try Tool.shell("printf 'text' > number.txt", in: dir)
        #expect(try Tool.run("/bin/cat", ["number.txt"], directory: dir).stdout == "text")
        #expect(try Self.state("notes/number.txt", in: mount) == "invalid")
        #expect(try mount.store.entity(bucket: "notes", key: "number")?.value == ["content": 42, "tags": .array([])])
        #expect(try mount.store.outgoingChanges(bucket: "notes").isEmpty)
    }

    @Test func bytesThatAreNotUTF8AreKeptLocallyAndReported() throws {
        let mount = try Self.mount()
        defer { mount.close() }
        let dir = mount.path("notes")
        // Written in one open-write-close (a shell's `>` would first save the empty file: its
        // dup2 and close flush it, and an empty text is a valid one).
        _ = try Tool.python("open('k.txt', 'wb').write(b'caf\\xe9\\n')", in: dir)
        #expect(try Data(contentsOf: URL(fileURLWithPath: dir + "/k.txt")) == Data([0x63, 0x61, 0x66, 0xE9, 0x0A]))
        #expect(try Self.state("notes/k.txt", in: mount) == "invalid")
        let entity = try #require(try mount.store.entity(bucket: "notes", key: "k"))
        #expect(entity.value == Self.note)
        #expect(entity.reason?.contains("UTF-8") == true)
        #expect(try mount.store.outgoingChanges(bucket: "notes").isEmpty)
        // Valid text again: it syncs.
        try Tool.shell("printf 'caf\\303\\251\\n' > k.txt", in: dir)
        #expect(try mount.store.entity(bucket: "notes", key: "k")?.value?["content"] == "café\n")
        #expect(try Self.state("notes/k.txt", in: mount) == "pending")
    }

    @Test func aRemoteChangeShowsInTheTextAndAChangeOfViewRendersTheFilesAgain() throws {
        let mount = try Self.mount()
        defer { mount.close() }
        let dir = mount.path("notes")
        var next = Self.note
        next["content"] = "Shopping\n\n- milk\n- tea\n"
        next["tags"] = .array(["home", "weekly"])
        _ = try mount.store.applyEntity(bucket: "notes", key: "k", version: 2, data: next)
        #expect(eventually { (try? Tool.run("/bin/cat", ["k.txt"], directory: dir).stdout) == "Shopping\n\n- milk\n- tea\n" })

        // The same store mounted as JSON shows the whole entity again.
        mount.unmount()
        let store = try SyncStore(path: mount.storePath)
        try store.setFileFormat(nil, forBucket: "notes")
        try store.close()
        try mount.remount()
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir) == ["k.json"])
        #expect(try Tool.run("/bin/cat", ["k.json"], directory: dir).stdout == JSONValue.object(next).prettyRendered())
    }
}
