import Foundation
import JSONDiff
import Synchronization
import Testing
@testable import SyncStore

@Suite("save journal", .timeLimit(.minutes(2)))
struct SaveJournalTests {
    static func save(_ sequence: Int64, _ key: String, _ text: String, nodeID: Int64? = nil, bucket: String = "notes")
        -> JournaledEdit
    {
        JournaledEdit(
            sequence: sequence, bucket: bucket, key: key, edit: .save(bytes(text)), nodeID: nodeID,
            time: 1_700_000_000_000_000_000 + sequence)
    }

    static func removal(_ sequence: Int64, _ key: String) -> JournaledEdit {
        JournaledEdit(sequence: sequence, bucket: "notes", key: key, edit: .remove, time: 1_700_000_000_000_000_000 + sequence)
    }

    static let variedSaves = [
        save(1, "plain", #"{"a": 1}"#, nodeID: 42),
        save(2, "ünïcödé/key with spaces", "", nodeID: nil),
        save(3, "big", String(repeating: "x", count: 200_000), nodeID: Int64.max),
        removal(4, "gone"),
        JournaledEdit(sequence: 5, bucket: "b", key: "", edit: .save([0, 255, 0x80, 10]), nodeID: 2, time: -1),
    ]

    @Test func editsReadBackExactlyAndInOrderFromAnotherOpening() throws {
        let directory = try TemporaryDirectory()
        defer { directory.cleanup() }
        let path = SaveJournal.path(besideStore: directory.storePath)
        do {
            let journal = try SaveJournal(path: path)
            for edit in Self.variedSaves { try journal.append(edit) }
        }
        #expect(try SaveJournal(path: path).recorded() == Self.variedSaves)
    }

    /// A record cut short anywhere (a power loss mid-append), or with any byte of its checksum or
    /// payload changed, ends the reading there: the records before it are read, nothing after.
    @Test func aRecordCutShortOrAlteredEndsTheReading() throws {
        let records = Self.variedSaves.prefix(3).map(SaveJournal.encode)
        let whole = records.joined()
        #expect(SaveJournal.decode(Array(whole)) == Array(Self.variedSaves.prefix(3)))
        let firstTwo = records[0].count + records[1].count
        let second = records[0].count..<firstTwo
        for cut in (records[0].count + 1)..<firstTwo {
            #expect(SaveJournal.decode(Array(whole.prefix(cut))) == [Self.variedSaves[0]], "cut at \(cut)")
        }
        for position in (second.lowerBound + 4)..<second.upperBound {
            var altered = Array(whole)
            altered[position] ^= 0x5A
            #expect(SaveJournal.decode(altered) == [Self.variedSaves[0]], "byte \(position) altered")
        }
    }

    @Test func emptyingKeepsTheFileOpenForLaterSaves() throws {
        let directory = try TemporaryDirectory()
        defer { directory.cleanup() }
        let journal = try SaveJournal(path: SaveJournal.path(besideStore: directory.storePath))
        try journal.append(Self.save(1, "a", "{}"))
        try journal.removeAll()
        #expect(try journal.recorded().isEmpty)
        try journal.append(Self.save(2, "b", "{}"))
        #expect(try journal.recorded() == [Self.save(2, "b", "{}")])
    }

    @Test func theStoreAppliesSavesAsSaveLocalDoesAtTheTimeEachWasMade() throws {
        try withStore { store, _ in
            let outcome = try store.applyJournaledEdits([Self.save(1, "a", #"{"n": 1}"#, nodeID: 900), Self.save(2, "bad", "not json")])
            #expect(outcome.applied.count == 2 && outcome.refused.isEmpty)
            let a = try #require(try store.entity(bucket: "notes", key: "a"))
            #expect(a.content == bytes(#"{"n": 1}"#) && a.value == ["n": 1])
            #expect(a.nodeID == 900 && a.mtime == Self.save(1, "a", "").time && a.ctime == a.mtime)
            #expect(outcome.applied[0].readyToSend?.key == "a")
            #expect(outcome.applied[1].parseError != nil && outcome.applied[1].readyToSend == nil)
            #expect(try store.outgoingChanges(bucket: "notes").map(\.key) == ["a"])
            #expect(try store.appliedJournalSequence() == 2)
        }
    }

    /// A removal goes as `deleteLocal` does: the file is gone, and the removal is owed to the
    /// server once the entity had reached it; one that never had is simply forgotten.
    @Test func theStoreAppliesRemovalsAsDeleteLocalDoes() throws {
        try withStore { store, _ in
            _ = try seed(store, key: "synced", version: 3, data: ["s": 1])
            _ = try store.applyJournaledEdits([Self.save(1, "local", "{}"), Self.removal(2, "local"), Self.removal(3, "synced")])
            #expect(try store.entity(bucket: "notes", key: "local") == nil)
            #expect(try store.lookup(bucket: "notes", name: .entity(key: "synced")) == nil)
            let owed = try store.outgoingChanges(bucket: "notes")
            #expect(owed.map(\.key) == ["synced"] && owed.first?.operation == .remove)
        }
    }

    /// What a server sends is applied after the journaled edits made before it arrived: a remote
    /// change merges with a save still in the journal (both edits kept, the local one rebased
    /// onto the new version), whichever of the three remote entry points brings it.
    @Test(arguments: ["applyRemote", "applyEntity", "applyIndexPage"])
    func remoteDataIsAppliedAfterTheEditsJournaledBeforeIt(entryPoint: String) throws {
        try withStore { store, _ in
            let base: JSONObject = ["a": 1, "b": 1]
            _ = try seed(store, key: "k", version: 1, data: base)
            let journaled = Mutex([Self.save(1, "k", #"{"a": 2, "b": 1}"#)])
            store.applyLocalEditsFirst { bucket, keys in
                #expect(bucket == "notes" && keys == ["k"])
                let edits = journaled.withLock { edits in
                    defer { edits = [] }
                    return edits
                }
                if !edits.isEmpty { _ = try? store.applyJournaledEdits(edits) }
            }
            let remote: JSONObject = ["a": 1, "b": 3]
            switch entryPoint {
            case "applyRemote":
                _ = try store.applyRemote(
                    bucket: "notes",
                    changes: [RemoteChange(key: "k", operation: .modify(diff: wireDiff(base, remote)), sourceVersion: 1, endVersion: 2, cv: "c2")])
            case "applyEntity":
                _ = try store.applyEntity(bucket: "notes", key: "k", version: 2, data: remote)
            default:
                _ = try store.applyIndexPage(bucket: "notes", entries: [IndexEntry(key: "k", version: 2, data: remote)], current: nil, isLast: false)
            }
            #expect(journaled.withLock { $0.isEmpty })
            #expect(try store.entity(bucket: "notes", key: "k")?.value == ["a": 2, "b": 3])
            let owed = try store.outgoingChanges(bucket: "notes")
            #expect(owed.map(\.key) == ["k"] && owed.first?.sourceVersion == 2)
        }
    }

    /// The hook runs at the same stack depth however often it has run. Held as a bare closure in
    /// the store's lock, it came out of every read wrapped in two more reabstraction thunks, and
    /// was stored back so: each remote batch made the next call deeper and slower, and a long
    /// sync would in the end have overflowed the stack.
    @Test(arguments: ["applyRemote", "applyEntity", "applyIndexPage"])
    func theHookRunsAtTheSameDepthEveryTime(entryPoint: String) throws {
        try withStore { store, _ in
            _ = try seed(store, key: "k", version: 1, data: ["a": 1])
            let depths = Mutex<[Int]>([])
            store.applyLocalEditsFirst { _, _ in depths.withLock { $0.append(Thread.callStackReturnAddresses.count) } }
            for _ in 0..<40 {
                switch entryPoint {
                case "applyRemote": _ = try store.applyRemote(bucket: "notes", changes: [])
                case "applyEntity": _ = try store.applyEntity(bucket: "notes", key: "k", version: 1, data: ["a": 1])
                default: _ = try store.applyIndexPage(bucket: "notes", entries: [], current: nil, isLast: false)
                }
            }
            let seen = depths.withLock { $0 }
            #expect(seen.count == 40)
            #expect(Set(seen).count == 1, "stack depths \(seen)")
        }
    }

    /// A replay after a crash that left applied saves in the journal changes nothing: not the
    /// saves themselves, nor what came after them (a removal, a newer save).
    @Test func savesTheStoreHasAreNeverAppliedAgain() throws {
        try withStore { store, _ in
            let first = [Self.save(1, "removed", "{}"), Self.save(2, "edited", #"{"v": 1}"#), Self.save(3, "kept", "{}")]
            _ = try store.applyJournaledEdits(first)
            _ = try store.deleteLocal(bucket: "notes", key: "removed")
            _ = try store.saveLocal(bucket: "notes", key: "edited", bytes: bytes(#"{"v": 2}"#))
            let before = try ["edited", "kept"].map { try store.entity(bucket: "notes", key: $0) }
            let replay = try store.applyJournaledEdits(first)
            #expect(replay.applied.isEmpty)
            #expect(try store.entity(bucket: "notes", key: "removed") == nil)
            #expect(try ["edited", "kept"].map { try store.entity(bucket: "notes", key: $0) } == before)
            // Part of a batch is new: only that part is applied.
            let mixed = try store.applyJournaledEdits(first + [Self.save(4, "removed", #"{"back": true}"#)])
            #expect(mixed.applied.map(\.edit.sequence) == [4])
            #expect(try store.entity(bucket: "notes", key: "removed")?.value == ["back": true])
            #expect(try store.appliedJournalSequence() == 4)
        }
    }

    @Test func aSaveToABucketThatIsGoneOrARemovalOfNothingIsRefusedAndTheRestApplied() throws {
        try withStore { store, _ in
            let outcome = try store.applyJournaledEdits([
                Self.save(1, "x", "{}", bucket: "gone"), Self.removal(2, "never-saved"), Self.save(3, "y", "{}"),
            ])
            #expect(outcome.refused.map(\.edit.sequence) == [1, 2])
            #expect(outcome.applied.map(\.edit.sequence) == [3])
            #expect(try store.entity(bucket: "notes", key: "y") != nil)
            #expect(try store.appliedJournalSequence() == 3)
        }
    }
}
