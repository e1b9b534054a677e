import BucketFS
import Foundation
import SyncStore
import Testing

/// Saves and removals reach the store through its save journal: what a crash left there shows in the files,
/// and is on its way to the server, from the next mount on; what the store had already is not
/// applied a second time.
@Suite(.serialized, .timeLimit(.minutes(3)))
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
        #expect(try Self.size(of: journalPath) == 0, "an unmount leaves the journal empty")

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
        #expect(try Self.size(of: journalPath) == 0)

        // Saves after the replay go on from there.
        try Data(#"{"after": 1}"#.utf8).write(to: URL(fileURLWithPath: mount.path("notes/after.json")))
        #expect(try mount.store.appliedJournalSequence() == applied + 3)
        #expect(try mount.store.entity(bucket: "notes", key: "after")?.value == ["after": 1])
    }

    static func appliedSequence(_ storePath: String) throws -> Int64 {
        let store = try SyncStore(path: storePath)
        defer { try? store.close() }
        return try store.appliedJournalSequence()
    }

    static func size(of path: String) throws -> Int {
        (try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? -1
    }
}
