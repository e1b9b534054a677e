import BucketFS
import Foundation
import SyncStore
import Testing

/// Saves and removals reach the store through its save journal: what a crash left there shows in the files,
/// and is on its way to the server, from the next mount on; what the store had already is not
/// applied a second time.
@Suite(.serialized, .timeLimit(.minutes(Patience.testMinutes)))
struct SaveJournalMountTests {
    @Test func savesACrashLeftInTheJournalAreInTheFilesAtTheNextMount() throws {
        let first = try MountFixture()
        defer { first.close() }
        try Data(#"{"v": 1}"#.utf8).write(to: URL(fileURLWithPath: first.path("notes/old.json")))
        try Data(#"{"doomed": true}"#.utf8).write(to: URL(fileURLWithPath: first.path("notes/doomed.json")))
        first.unmount()
        let storePath = first.storePath
        let journalPath = SaveJournal.path(besideStore: storePath)
        let applied = try Self.appliedSequence(storePath)
        #expect(applied >= 2, "the saves went through the journal")
        #expect(try SaveJournal(path: journalPath).recorded().isEmpty, "an unmount leaves the journal empty")

        // What a crash leaves: a save the store had (the journal was not emptied yet), then a
        // save and a removal it never took.
        let savedAt: Int64 = 1_600_000_000 * 1_000_000_000
        let crashed = Array(#"{"saved": "before the crash"}"#.utf8)
        do {
            let journal = try SaveJournal(path: journalPath)
            try journal.append(
                JournaledEdit(sequence: applied, bucket: "notes", key: "old", edit: .save(Array(#"{"v": 0}"#.utf8)), time: savedAt))
            try journal.append(
                JournaledEdit(sequence: applied + 1, bucket: "notes", key: "crash", edit: .save(crashed), time: savedAt))
            try journal.append(JournaledEdit(sequence: applied + 2, bucket: "notes", key: "doomed", edit: .remove, time: savedAt))
        }

        let mount = try MountFixture(storePath: storePath)
        defer { mount.close() }
        #expect(try Array(Data(contentsOf: URL(fileURLWithPath: mount.path("notes/crash.json")))) == crashed)
        let modified = try FileManager.default.attributesOfItem(atPath: mount.path("notes/crash.json"))[.modificationDate] as? Date
        #expect(modified?.timeIntervalSince1970 == 1_600_000_000)
        #expect(try String(contentsOfFile: mount.path("notes/old.json"), encoding: .utf8) == #"{"v": 1}"#)
        #expect(!FileManager.default.fileExists(atPath: mount.path("notes/doomed.json")))
        #expect(try mount.store.outgoingChanges(bucket: "notes").map(\.key).contains("crash"))
        #expect(try mount.store.appliedJournalSequence() == applied + 2)
        #expect(try SaveJournal(path: journalPath).recorded().isEmpty)

        // Saves after the replay go on from there.
        try Data(#"{"after": 1}"#.utf8).write(to: URL(fileURLWithPath: mount.path("notes/after.json")))
        #expect(try mount.store.appliedJournalSequence() == applied + 3)
        #expect(try mount.store.entity(bucket: "notes", key: "after")?.value == ["after": 1])
    }

    /// fsync(2) syncs the journal, not the store, for the edits it holds; so the journal keeps
    /// an edit it was asked to keep past a power loss until the store's WAL is on disk too. An
    /// edit never fsynced leaves the journal as soon as the store has it, and the next fsync
    /// syncs the store for it.
    @Test func aJournalThatWasFsyncedIsEmptiedOnlyOnceTheStoreIsOnDisk() throws {
        try Self.withMountedBackend { backend, store in
            let journalPath = SaveJournal.path(besideStore: store.path)

            _ = try backend.save(bucket: "notes", name: .entity(key: "a"), bytes: Array(#"{"a": 1}"#.utf8), newID: nil)
            try backend.waitForJournaledEdits()
            #expect(try SaveJournal(path: journalPath).recorded().isEmpty)
            #expect(store.hasUnsyncedWrites)
            try backend.sync()
            #expect(!store.hasUnsyncedWrites, "the next fsync syncs what left the journal unsynced")

            // An editor's save, fsynced before its rename: the scratch file and the rename.
            let id = try backend.reserveIDs(count: 1).lowerBound
            _ = try backend.save(bucket: "notes", name: .localFile(name: ".b.json.tmp"), bytes: Array(#"{"b": 1}"#.utf8), newID: id)
            try backend.sync()
            try backend.waitForJournaledEdits()
            // In this order: the store is only ever synced more, never less, as time goes on.
            let held = try SaveJournal(path: journalPath).recorded()
            let unsynced = store.hasUnsyncedWrites
            #expect(!unsynced || held.contains { $0.file == .localFile(name: ".b.json.tmp") }, "dropped from the journal before the store was synced")
            let settled = eventually {
                let emptied = (try? SaveJournal(path: journalPath).recorded().isEmpty) ?? false
                if emptied { #expect(!store.hasUnsyncedWrites, "the journal was emptied before the store was synced") }
                return emptied
            }
            #expect(settled, "the journal is emptied once the store is synced")
        }
    }

    /// A scratch file renamed over an entity's file is journaled, and what the rename answers
    /// (the destination's number, size, times and permissions) is what the store has once it
    /// took the rename.
    @Test(arguments: [nil, 0o600] as [Int?])
    func aRenameOfAScratchFileAnswersWhatTheStoreThenHas(permissions: Int?) throws {
        try Self.withMountedBackend { backend, store in
            _ = try backend.save(bucket: "notes", name: .entity(key: "k"), bytes: Array(#"{"v": 1}"#.utf8), newID: nil)

            let id = try backend.reserveIDs(count: 1).lowerBound
            let scratch = MountItemName.localFile(name: ".k.json.tmp")
            _ = try backend.save(bucket: "notes", name: scratch, bytes: Array(#"{"v": 2}"#.utf8), newID: id)
            _ = try backend.setModificationTime(bucket: "notes", name: scratch, to: 1_500_000_000 * 1_000_000_000)
            if let permissions { _ = try backend.setAttributes(bucket: "notes", name: scratch, permissions: permissions, atime: nil) }
            let source = try #require(try backend.entry(bucket: "notes", name: scratch))
            let renamed = try backend.rename(bucket: "notes", from: source, to: .entity(key: "k"))
            #expect(renamed.id == id && renamed.mtime == 1_500_000_000 * 1_000_000_000)
            #expect(try backend.entry(bucket: "notes", name: .entity(key: "k")) == renamed)
            #expect(try backend.entry(bucket: "notes", name: scratch) == nil)
            #expect(try backend.read(bucket: "notes", name: .entity(key: "k")) == Array(#"{"v": 2}"#.utf8))
            #expect(try store.appliedJournalSequence() == 3, "the save, the scratch file and the rename went through the journal")
        }
    }

    /// An editor's save (a scratch file written, chmod'ed, dated, fsynced and renamed over the
    /// entity's file) shows the same bytes, number, size, time and permissions before and after
    /// a remount: what the mount answered at once is what the store took in the background.
    @Test func anEditorsSaveShowsTheSameFileAfterARemount() throws {
        let mount = try MountFixture()
        defer { mount.close() }
        try Data(#"{"v": 1}"#.utf8).write(to: URL(fileURLWithPath: mount.path("notes/k.json")))
        let text = #"{"v": 2, "saved": "by an editor"}"#
        let scratch = mount.path("notes/.k.json.tmp")
        let descriptor = open(scratch, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        #expect(descriptor >= 0)
        #expect(text.withCString { write(descriptor, $0, strlen($0)) } == text.utf8.count)
        #expect(fchmod(descriptor, 0o600) == 0)
        #expect(fsync(descriptor) == 0)
        #expect(close(descriptor) == 0)
        let dated = Date(timeIntervalSince1970: 1_500_000_000.25)
        try FileManager.default.setAttributes([.modificationDate: dated], ofItemAtPath: scratch)
        #expect(rename(scratch, mount.path("notes/k.json")) == 0)

        func shown() throws -> (ino: UInt64, size: Int, mtime: Int, nanoseconds: Int, mode: UInt32, text: String) {
            var info = stat()
            #expect(stat(mount.path("notes/k.json"), &info) == 0)
            let text = try String(contentsOfFile: mount.path("notes/k.json"), encoding: .utf8)
            return (UInt64(info.st_ino), Int(info.st_size), Int(info.st_mtim.tv_sec), Int(info.st_mtim.tv_nsec), info.st_mode & 0o777, text)
        }
        let before = try shown()
        #expect(before.text == text && before.size == text.utf8.count && before.mode == 0o600)
        #expect(before.mtime == 1_500_000_000 && before.nanoseconds == 250_000_000)
        try mount.remount()
        let after = try shown()
        #expect(after == before)
        #expect(!FileManager.default.fileExists(atPath: scratch))
        #expect(try mount.store.entity(bucket: "notes", key: "k")?.value == ["v": 2, "saved": "by an editor"])
    }

    /// A note of over a MiB goes into the store as its bytes, is parsed afterwards off the path
    /// of other saves (issue 37), and ends as a save parsed at once would: its value in the
    /// store, its change owed. A small note saved right after it is owed too.
    @Test func aLargeNoteIsParsedAfterItsSaveAndEndsAsAnyOther() throws {
        let mount = try MountFixture()
        defer { mount.close() }
        let value = Dictionary(uniqueKeysWithValues: (0..<80_000).map { ("k\($0)", $0) })
        let big = try JSONSerialization.data(withJSONObject: value, options: [.sortedKeys])
        #expect(big.count > SyncStoreBackend.parsedLaterFrom)
        try big.write(to: URL(fileURLWithPath: mount.path("notes/big.json")))
        try Data(#"{"small": true}"#.utf8).write(to: URL(fileURLWithPath: mount.path("notes/small.json")))
        #expect(try Data(contentsOf: URL(fileURLWithPath: mount.path("notes/big.json"))) == big)
        #expect(eventually { (try? mount.store.entitiesParsedLater().isEmpty) == true })
        let stored = try #require(try mount.store.entity(bucket: "notes", key: "big"))
        #expect(stored.value?.count == value.count && stored.value?["k79999"] == 79_999 && stored.content == [UInt8](big))
        #expect(Set(try mount.store.outgoingChanges(bucket: "notes").map(\.key)) == ["big", "small"])
    }

    /// A large save the last mount took but did not parse (it stopped first) is parsed by the next.
    @Test func aLargeSaveLeftUnparsedIsParsedAtTheNextMount() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("bucketfs-test-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let storePath = directory.appendingPathComponent("left.sqlite").path
        do {
            let store = try SyncStore(path: storePath)
            defer { try? store.close() }
            _ = try store.ensureBucket("notes")
            let save = JournaledEdit(sequence: 1, bucket: "notes", key: "k", edit: .save(Array(#"{"left": 1}"#.utf8)), time: 1)
            #expect(try store.applyJournaledEdits([save], parsingLaterFrom: 1).parsedLater.map(\.key) == ["k"])
        }
        let mount = try MountFixture(storePath: storePath)
        defer { mount.close() }
        #expect(eventually { (try? mount.store.entitiesParsedLater().isEmpty) == true })
        #expect(try mount.store.entity(bucket: "notes", key: "k")?.value == ["left": 1])
        #expect(try mount.store.outgoingChanges(bucket: "notes").map(\.key) == ["k"])
    }

    /// A backend over a new store with bucket `notes`, journaling as a mount's does, with no
    /// file system over it.
    static func withMountedBackend(_ body: (SyncStoreBackend, SyncStore) throws -> Void) throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("bucketfs-test-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try SyncStore(path: directory.appendingPathComponent("store.sqlite").path)
        defer { try? store.close() }
        _ = try store.ensureBucket("notes")
        let backend = SyncStoreBackend(store: store)
        try backend.prepareForMount()
        try body(backend, store)
    }

    static func appliedSequence(_ storePath: String) throws -> Int64 {
        let store = try SyncStore(path: storePath)
        defer { try? store.close() }
        return try store.appliedJournalSequence()
    }
}
