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
            time: time(sequence))
    }

    /// When the edit numbered `sequence` is made, in the helpers below.
    static func time(_ sequence: Int64) -> Int64 { 1_700_000_000_000_000_000 + sequence }

    static func removal(_ sequence: Int64, _ key: String) -> JournaledEdit {
        JournaledEdit(sequence: sequence, bucket: "notes", key: key, edit: .remove, time: time(sequence))
    }

    static func localSave(_ sequence: Int64, _ name: String, _ text: String, nodeID: Int64? = nil) -> JournaledEdit {
        JournaledEdit(
            sequence: sequence, bucket: "notes", file: .localFile(name: name), edit: .save(bytes(text)), nodeID: nodeID,
            time: time(sequence))
    }

    static func localRemoval(_ sequence: Int64, _ name: String) -> JournaledEdit {
        JournaledEdit(
            sequence: sequence, bucket: "notes", file: .localFile(name: name), edit: .remove,
            time: time(sequence))
    }

    static func rename(_ sequence: Int64, _ source: EntryName, to destination: EntryName) -> JournaledEdit {
        JournaledEdit(
            sequence: sequence, bucket: "notes", file: source, edit: .rename(to: destination),
            time: time(sequence))
    }

    static let variedSaves = [
        save(1, "plain", #"{"a": 1}"#, nodeID: 42),
        save(2, "ünïcödé/key with spaces", "", nodeID: nil),
        save(3, "big", String(repeating: "x", count: 200_000), nodeID: Int64.max),
        removal(4, "gone"),
        JournaledEdit(sequence: 5, bucket: "b", key: "", edit: .save([0, 255, 0x80, 10]), nodeID: 2, time: -1),
        localSave(6, ".ünï.json.swp", "\u{0}scratch", nodeID: 77),
        localRemoval(7, "4913"),
        rename(8, .localFile(name: ".a.json.tmp"), to: .entity(key: "a")),
        rename(9, .entity(key: "b"), to: .localFile(name: "b.bak")),
        rename(10, .localFile(name: ""), to: .localFile(name: "x~")),
        rename(11, .entity(key: "c"), to: .entity(key: "ç")),
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

    /// A journal a crash left before local files and renames were journaled reads as it did: an
    /// entity's save and removal are encoded as they were then (built here byte by byte from the
    /// format's description, not by `encode`).
    @Test func aJournalFromBeforeLocalFilesWereJournaledReadsTheSame() throws {
        func record(sequence: UInt64, time: UInt64, nodeID: UInt64, bucket: String, key: String, kind: UInt8, rest: [UInt8]) -> [UInt8] {
            func little<T: FixedWidthInteger>(_ value: T) -> [UInt8] { withUnsafeBytes(of: value.littleEndian) { Array($0) } }
            let payload =
                little(sequence) + little(time) + little(nodeID) + little(UInt32(bucket.utf8.count)) + Array(bucket.utf8)
                + little(UInt32(key.utf8.count)) + Array(key.utf8) + [kind] + rest
            var hash: UInt64 = 0xcbf2_9ce4_8422_2325
            for byte in payload { hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01b3 }
            return little(UInt32(payload.count)) + little(hash) + payload
        }
        let old =
            record(sequence: 3, time: 9, nodeID: 42, bucket: "notes", key: "a", kind: 0, rest: bytes(#"{"v": 1}"#))
            + record(sequence: 4, time: 10, nodeID: 0, bucket: "notes", key: "b", kind: 1, rest: [])
        #expect(
            SaveJournal.decode(old) == [
                JournaledEdit(sequence: 3, bucket: "notes", key: "a", edit: .save(bytes(#"{"v": 1}"#)), nodeID: 42, time: 9),
                JournaledEdit(sequence: 4, bucket: "notes", key: "b", edit: .remove, time: 10),
            ])
        #expect(SaveJournal.encode(Self.variedSaves[0]) == record(
            sequence: 1, time: UInt64(Self.variedSaves[0].time), nodeID: 42, bucket: "notes", key: "plain", kind: 0,
            rest: bytes(#"{"a": 1}"#)))
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

    /// Records overwrite the file from its start once it is emptied: those from before are never
    /// read again, whether the new ones end on a boundary of theirs (a lower sequence number
    /// follows) or inside one (its checksum fails), in this opening or the next.
    @Test(arguments: [1, 40])
    func recordsFromBeforeTheJournalWasEmptiedAreNeverReadAgain(newLength: Int) throws {
        let directory = try TemporaryDirectory()
        defer { directory.cleanup() }
        let path = SaveJournal.path(besideStore: directory.storePath)
        let journal = try SaveJournal(path: path)
        let old = (1...5).map { Self.save(Int64($0), "k\($0)", String(repeating: "o", count: 20)) }
        for edit in old { try journal.append(edit) }
        #expect(try journal.recorded() == old)
        try journal.removeAll()
        #expect(try journal.recorded().isEmpty)
        #expect(try SaveJournal(path: path).recorded().isEmpty)
        let new = Self.save(6, "k1", String(repeating: "n", count: newLength))
        try journal.append(new)
        #expect(try journal.recorded() == [new])
        // Another opening writes after the records it finds.
        let next = Self.save(7, "k2", "{}")
        try SaveJournal(path: path).append(next)
        #expect(try journal.recorded() == [new, next])
    }

    /// Records fill the size the file has written, so an fsync flushes them alone; a record
    /// past it grows the file, and emptying a journal that grew large gives the room back.
    @Test func theFileGrowsOnlyWhenARecordDoesNotFitAndShrinksWhenEmptied() throws {
        let directory = try TemporaryDirectory()
        defer { directory.cleanup() }
        let path = SaveJournal.path(besideStore: directory.storePath)
        func size() throws -> Int { (try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? -1 }
        let journal = try SaveJournal(path: path)
        try journal.append(Self.save(1, "a", "{}"))
        #expect(try size() == SaveJournal.initialSize)
        for sequence in 2...100 { try journal.append(Self.save(Int64(sequence), "a", #"{"n": 1}"#)) }
        #expect(try size() == SaveJournal.initialSize)
        let big = Self.save(101, "big", String(repeating: "x", count: 5 * SaveJournal.initialSize))
        try journal.append(big)
        #expect(try size() >= 5 * SaveJournal.initialSize)
        #expect(try journal.recorded().last == big)
        try journal.removeAll()
        #expect(try size() == SaveJournal.initialSize)
        try journal.append(Self.save(102, "a", "{}"))
        #expect(try journal.recorded() == [Self.save(102, "a", "{}")])
    }

    /// A journal an older mount left (records appended one after another, nothing after them):
    /// read as it was, and new records go after it.
    @Test func aJournalWrittenByAppendingIsReadAndWrittenOn() throws {
        let directory = try TemporaryDirectory()
        defer { directory.cleanup() }
        let path = SaveJournal.path(besideStore: directory.storePath)
        let old = Array(Self.variedSaves.prefix(4))
        #expect(FileManager.default.createFile(atPath: path, contents: Data(old.flatMap(SaveJournal.encode))))
        let journal = try SaveJournal(path: path)
        #expect(try journal.recorded() == old)
        let new = Self.save(90, "n", "{}")
        try journal.append(new)
        #expect(try SaveJournal(path: path).recorded() == old + [new])
    }

    @Test func theStoreAppliesSavesAsSaveLocalDoesAtTheTimeEachWasMade() throws {
        try withStore { store, _ in
            let outcome = try store.applyJournaledEdits([Self.save(1, "a", #"{"n": 1}"#, nodeID: 900), Self.save(2, "bad", "not json")])
            #expect(outcome.applied.count == 2 && outcome.refused.isEmpty)
            let a = try #require(try store.entity(bucket: "notes", key: "a"))
            #expect(a.content == bytes(#"{"n": 1}"#) && a.value == ["n": 1])
            #expect(a.nodeID == 900 && a.mtime == Self.time(1) && a.ctime == a.mtime)
            #expect(outcome.applied[0].readyToSend.map(\.key) == ["a"])
            #expect(outcome.applied[1].parseError != nil && outcome.applied[1].readyToSend.isEmpty)
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
            try applyVersion2(store, through: entryPoint, key: "k", from: base, to: ["a": 1, "b": 3])
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

    /// An editor's save, journaled: the scratch file written, then renamed over the entity's
    /// file. The store ends as `writeLocalFile` and `rename` leave it: the entity has the bytes,
    /// the scratch file's number and modification time, the change is owed, and no local file
    /// is left.
    @Test func aScratchFileRenamedOverAnEntityIsApplied() throws {
        try withStore { store, _ in
            _ = try seed(store, key: "k", version: 1, data: ["v": 1])
            let outcome = try store.applyJournaledEdits([
                Self.localSave(1, ".k.json.tmp", #"{"v": 2}"#, nodeID: 700),
                Self.rename(2, .localFile(name: ".k.json.tmp"), to: .entity(key: "k")),
            ])
            #expect(outcome.refused.isEmpty && outcome.applied.count == 2)
            #expect(outcome.applied[1].readyToSend.map(\.key) == ["k"])
            let entity = try #require(try store.entity(bucket: "notes", key: "k"))
            #expect(entity.value == ["v": 2] && entity.nodeID == 700)
            #expect(entity.mtime == Self.time(1) && entity.ctime == Self.time(2))
            #expect(try store.lookup(bucket: "notes", name: .localFile(name: ".k.json.tmp")) == nil)
            let owed = try store.outgoingChanges(bucket: "notes")
            #expect(owed.map(\.key) == ["k"] && owed.first?.sourceVersion == 1)
        }
    }

    /// An editor's save in one batch (a new scratch file's save, then its rename over an entity's
    /// file) never writes the scratch file's row, yet the store ends exactly as when the two
    /// edits are applied a batch each, in each case below: the entity new or stored, its bytes
    /// valid or not. Pairs that are not such a save go the usual way, to the same end: a scratch
    /// file the store has already (with its own permissions and access time), one too large for
    /// an entity, one renamed to a local name, a bucket that is gone.
    @Test(arguments: EditorsSaveCase.allCases)
    func anEditorsSaveInOneBatchEndsAsItsTwoEditsAppliedApart(_ scenario: EditorsSaveCase) throws {
        let directory = try TemporaryDirectory()
        defer { directory.cleanup() }
        let setup = try SyncStore(path: directory.storePath)
        _ = try setup.ensureBucket("notes")
        try seed(setup, key: "k", version: 3, data: ["v": 1])
        let scratch = ".k.json.tmp"
        if scenario == .scratchStoredAlready {
            _ = try setup.applyJournaledEdits([Self.localSave(1, scratch, "old", nodeID: 600)])
            try setup.setAttributes(bucket: "notes", name: .localFile(name: scratch), mode: 0o600, atime: 12345)
        }
        try setup.close()
        // Two stores from the same start: one takes the pair in one batch, the other apart.
        var stores: [SyncStore] = []
        for copy in ["together", "apart"] {
            try FileManager.default.createDirectory(atPath: "\(directory.path)/\(copy)", withIntermediateDirectories: false)
            for suffix in ["", "-wal"] where FileManager.default.fileExists(atPath: directory.storePath + suffix) {
                try FileManager.default.copyItem(atPath: directory.storePath + suffix, toPath: "\(directory.path)/\(copy)/store.sqlite\(suffix)")
            }
            stores.append(try SyncStore(path: "\(directory.path)/\(copy)/store.sqlite"))
        }
        defer { for store in stores { try? store.close() } }
        // Counts the scratch file rows each store writes (on its writer's connection).
        for store in stores {
            try store.write { db in
                try db.execute(sql: """
                    CREATE TEMP TABLE local_file_inserts (name TEXT);
                    CREATE TEMP TRIGGER count_local_file_inserts AFTER INSERT ON main.local_file
                    BEGIN INSERT INTO local_file_inserts VALUES (new.name); END;
                    """)
            }
        }
        func scratchRowsWritten(_ store: SyncStore) throws -> Int {
            try store.write { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM temp.local_file_inserts") ?? -1 }
        }
        let bytes: String
        switch scenario {
        case .tooLarge: bytes = #"{"v": ""# + String(repeating: "x", count: SyncStore.entityFileLimit) + #""}"#
        case .invalidJSON: bytes = "not json"
        default: bytes = #"{"v": 2}"#
        }
        let bucket = scenario == .bucketGone ? "gone" : "notes"
        let destination: EntryName = switch scenario {
        case .newEntity: .entity(key: "new")
        case .toALocalName: .localFile(name: "k.json.bak")
        default: .entity(key: "k")
        }
        let edits = [
            JournaledEdit(
                sequence: 2, bucket: bucket, file: .localFile(name: scratch), edit: .save(Array(bytes.utf8)), nodeID: 700,
                time: Self.time(2)),
            JournaledEdit(sequence: 3, bucket: bucket, file: .localFile(name: scratch), edit: .rename(to: destination), time: Self.time(3)),
        ]
        let together = try stores[0].applyJournaledEdits(edits)
        let apart = try edits.map { try stores[1].applyJournaledEdits([$0]) }
        #expect(together.applied.map(\.edit) == apart.flatMap(\.applied).map(\.edit))
        #expect(together.applied.map { $0.readyToSend.map(\.key) } == apart.flatMap(\.applied).map { $0.readyToSend.map(\.key) })
        #expect(together.refused.map(\.edit) == apart.flatMap(\.refused).map(\.edit))
        /// A change owed, less its ccid (random).
        struct Owed: Hashable {
            let key: String
            let sourceVersion: Int?
            let operation: OutgoingOperation
            let fullData: JSONObject?
            let state: ChangeState
        }
        func state(_ store: SyncStore) throws -> (entries: [DirectoryEntry], entities: [EntityInfo?], owed: [Owed], applied: Int64) {
            let entries = try store.entries(bucket: "notes").sorted { "\($0.name)" < "\($1.name)" }
            let entities = try entries.compactMap { entry -> String? in
                if case .entity(let key) = entry.name { return key } else { return nil }
            }.map { try store.entity(bucket: "notes", key: $0) }
            let owed = try store.outgoingChanges(bucket: "notes").map {
                Owed(key: $0.key, sourceVersion: $0.sourceVersion, operation: $0.operation, fullData: $0.fullData, state: $0.state)
            }
            return (entries, entities, owed, try store.appliedJournalSequence())
        }
        let (a, b) = (try state(stores[0]), try state(stores[1]))
        #expect(a.entries == b.entries)
        #expect(a.entities == b.entities)
        #expect(a.owed == b.owed)
        #expect(a.applied == 3 && b.applied == 3)
        // Taken as one save where it is an editor's save of a new scratch file, and only there (a
        // stored scratch file's save updates its row; a bucket that is gone takes neither edit).
        let newScratchRow = scenario != .scratchStoredAlready && scenario != .bucketGone
        let coalesced = [.entityStored, .newEntity, .invalidJSON].contains(scenario)
        #expect(try scratchRowsWritten(stores[0]) == (newScratchRow && !coalesced ? 1 : 0))
        #expect(try scratchRowsWritten(stores[1]) == (newScratchRow ? 1 : 0))
    }

    enum EditorsSaveCase: CaseIterable, Sendable {
        case entityStored, newEntity, invalidJSON, scratchStoredAlready, tooLarge, toALocalName, bucketGone
    }

    /// Local files: a save creates or replaces one (under the number it was handed), a removal
    /// removes it, a rename moves it; none is ever sent.
    @Test func localFileEditsAreAppliedAndNeverSent() throws {
        try withStore { store, _ in
            _ = try store.applyJournaledEdits([
                Self.localSave(1, "a.swp", "one", nodeID: 501), Self.localSave(2, "a.swp", "two", nodeID: 501),
                Self.localSave(3, "gone~", "x", nodeID: 502), Self.localRemoval(4, "gone~"),
                Self.localSave(5, "old", "moved", nodeID: 503), Self.rename(6, .localFile(name: "old"), to: .localFile(name: "new")),
            ])
            let a = try #require(try store.lookup(bucket: "notes", name: .localFile(name: "a.swp")))
            #expect(a.id == 501 && a.size == 3)
            #expect(try store.lookup(bucket: "notes", name: .localFile(name: "gone~")) == nil)
            #expect(try store.lookup(bucket: "notes", name: .localFile(name: "old")) == nil)
            let moved = try #require(try store.lookup(bucket: "notes", name: .localFile(name: "new")))
            #expect(moved.id == 503 && moved.size == 5)
            #expect(try store.outgoingChanges(bucket: "notes").isEmpty)
        }
    }

    @Test func aSaveToABucketThatIsGoneOrARemovalOfNothingIsRefusedAndTheRestApplied() throws {
        try withStore { store, _ in
            let outcome = try store.applyJournaledEdits([
                Self.save(1, "x", "{}", bucket: "gone"), Self.removal(2, "never-saved"), Self.save(3, "y", "{}"),
                Self.localRemoval(4, "never-written"), Self.rename(5, .localFile(name: "never-written"), to: .entity(key: "y")),
            ])
            #expect(outcome.refused.map(\.edit.sequence) == [1, 2, 4, 5])
            #expect(outcome.applied.map(\.edit.sequence) == [3])
            #expect(try store.entity(bucket: "notes", key: "y")?.value == [:])
            #expect(try store.appliedJournalSequence() == 5)
        }
    }
}
