import Foundation
import GRDB
import Synchronization
import JSONDiff
import Testing
@testable import SyncStore

/// Saves the store takes as their bytes and parses afterwards (issue 37: a note of several MiB
/// held up every save after it). `parsingLaterFrom: 1` here: any save is parsed later, so the
/// cases are small and exact. Whatever happens before the parse, the outcome is the one the save
/// parsed at once would have had.
@Suite("saves parsed later", .timeLimit(.minutes(2)))
struct DeferredParseTests {
    typealias Journal = SaveJournalTests

    static func owed(_ store: SyncStore) throws -> [String: OutgoingOperation] {
        Dictionary(uniqueKeysWithValues: try store.outgoingChanges(bucket: "notes").map { ($0.key, $0.operation) })
    }

    @Test func aLargeSaveGoesInAsItsBytesAndIsQueuedOnceParsed() throws {
        try withStore { store, _ in
            let outcome = try store.applyJournaledEdits([Journal.save(1, "k", #"{"n": 2}"#, nodeID: 900)], parsingLaterFrom: 1)
            #expect(outcome.parsedLater.map(\.key) == ["k"] && outcome.applied.flatMap(\.readyToSend).isEmpty)
            let waiting = try #require(try store.entity(bucket: "notes", key: "k"))
            #expect(waiting.content == bytes(#"{"n": 2}"#) && waiting.nodeID == 900 && waiting.mtime == Journal.time(1))
            #expect(waiting.state == .pending && waiting.value == nil)
            #expect(try store.syncState(bucket: "notes", key: "k").map { "\($0.state) \($0.version as Int?)" } == "pending nil")
            #expect(try store.outgoingChanges(bucket: "notes").isEmpty)
            #expect(try store.stats().savesParsedLater == 1)
            #expect(try store.entitiesParsedLater().map(\.key) == ["k"])

            let finished = try #require(try store.finishDeferredParse(bucket: "notes", key: "k"))
            #expect(finished.readyToSend?.key == "k" && finished.parseError == nil)
            let parsed = try #require(try store.entity(bucket: "notes", key: "k"))
            #expect(parsed.value == ["n": 2] && parsed.content == waiting.content && parsed.mtime == waiting.mtime)
            #expect(try Self.owed(store).keys.sorted() == ["k"])
            #expect(try store.stats().savesParsedLater == 0 && store.entitiesParsedLater().isEmpty)
            #expect(try store.finishDeferredParse(bucket: "notes", key: "k") == nil)
        }
    }

    /// A save over the waiting one, parsed at once or later itself: the newer bytes are the value.
    @Test(arguments: [nil, 1])
    func aSaveOverTheWaitingOneIsTheOneThatCounts(secondParsedLaterFrom: Int?) throws {
        try withStore { store, _ in
            _ = try store.applyJournaledEdits([Journal.save(1, "k", #"{"n": 1}"#)], parsingLaterFrom: 1)
            _ = try store.applyJournaledEdits([Journal.save(2, "k", #"{"n": 2}"#)], parsingLaterFrom: secondParsedLaterFrom)
            _ = try store.finishDeferredParse(bucket: "notes", key: "k")
            #expect(try store.finishDeferredParse(bucket: "notes", key: "k") == nil)
            #expect(try store.entity(bucket: "notes", key: "k")?.value == ["n": 2])
            let owed = try store.outgoingChanges(bucket: "notes")
            #expect(owed.count == 1 && owed.first?.operation == .modify(diff: wireDiff([:], ["n": 2])))
        }
    }

    /// A save that comes between the parse and the transaction that settles it (the parse runs
    /// outside any transaction), of other bytes or of the same ones: what counts is the last
    /// save, parsed, and the store is not fooled by bytes of the same length.
    @Test(arguments: [#"{"n": 3}"#, #"{"n": 2}"#])
    func aSaveBetweenTheParseAndItsTransactionIsTheOneThatCounts(second: String) throws {
        try withStore { store, _ in
            _ = try store.applyJournaledEdits([Journal.save(1, "k", #"{"n": 2}"#)], parsingLaterFrom: 1)
            let parses = Mutex(0)
            store.afterDeferredParse.withLock {
                $0 = SyncStore.TestHook {
                    guard parses.withLock({ $0 += 1; return $0 }) == 1 else { return }
                    _ = try? store.applyJournaledEdits([Journal.save(2, "k", second)], parsingLaterFrom: 1)
                }
            }
            let finished = try #require(try store.finishDeferredParse(bucket: "notes", key: "k"))
            #expect(parses.withLock { $0 } == 2 && finished.readyToSend?.key == "k")
            let entity = try #require(try store.entity(bucket: "notes", key: "k"))
            #expect(entity.value == object(second) && entity.content == bytes(second) && entity.state == .pending)
            #expect(try Self.owed(store) == ["k": .modify(diff: wireDiff([:], object(second)))])
            #expect(try store.entitiesParsedLater().isEmpty)
        }
    }

    /// A change from the server to the note whose save waits merges with that save, as with
    /// one parsed at once: the store parses it first, whichever entry point brings the change.
    @Test(arguments: ["applyRemote", "applyEntity", "applyIndexPage"])
    func remoteDataMergesWithTheWaitingSave(entryPoint: String) throws {
        try withStore { store, _ in
            let base: JSONObject = ["a": 1, "b": 1]
            try seed(store, key: "k", version: 1, data: base)
            _ = try store.applyJournaledEdits([Journal.save(1, "k", #"{"a": 2, "b": 1}"#)], parsingLaterFrom: 1)
            let outcome = try applyVersion2(store, through: entryPoint, key: "k", from: base, to: ["a": 1, "b": 3])
            let entity = try #require(try store.entity(bucket: "notes", key: "k"))
            #expect(entity.value == ["a": 2, "b": 3] && entity.version == 2)
            #expect(try JSONValue(parsing: entity.content).objectValue == ["a": 2, "b": 3])
            let owed = try store.outgoingChanges(bucket: "notes")
            #expect(owed.map(\.key) == ["k"] && owed.first?.sourceVersion == 2)
            #expect(outcome.readyToSend.map(\.key) == ["k"])
            #expect(try store.entitiesParsedLater().isEmpty)
            #expect(try store.finishDeferredParse(bucket: "notes", key: "k") == nil)
        }
    }

    /// A removal from elsewhere does not take a note whose save here waits to be parsed: that
    /// save is an edit the server has not had, as it is once parsed.
    @Test func aRemovalFromElsewhereKeepsTheWaitingSave() throws {
        try withStore { store, _ in
            try seed(store, key: "k", version: 1, data: ["a": 1])
            _ = try store.applyJournaledEdits([Journal.save(1, "k", #"{"a": 2}"#)], parsingLaterFrom: 1)
            _ = try store.applyRemote(
                bucket: "notes", changes: [RemoteChange(key: "k", operation: .remove, sourceVersion: 1, endVersion: 2, cv: "c2")])
            let entity = try #require(try store.entity(bucket: "notes", key: "k"))
            #expect(entity.value == ["a": 2] && entity.content == bytes(#"{"a": 2}"#))
            #expect(try Self.owed(store).keys.sorted() == ["k"])
        }
    }

    /// The file removed right after its large save (issue 34's class, with a big note): the
    /// removal is what the server gets, for a note it has; a new note leaves nothing behind.
    @Test func aRemovalRightAfterTheSaveIsSentNeverTheSave() throws {
        try withStore { store, _ in
            try seed(store, key: "old", version: 1, data: ["a": 1])
            _ = try store.applyJournaledEdits(
                [Journal.save(1, "old", #"{"a": 2}"#), Journal.save(2, "new", #"{"b": 1}"#), Journal.removal(3, "old"), Journal.removal(4, "new")],
                parsingLaterFrom: 1)
            #expect(try store.lookup(bucket: "notes", name: .entity(key: "old")) == nil)
            #expect(try store.entity(bucket: "notes", key: "new") == nil)
            #expect(try Self.owed(store) == ["old": .remove])
            #expect(try store.entitiesParsedLater().isEmpty)
            #expect(try store.finishDeferredParse(bucket: "notes", key: "old") == nil)
            #expect(try store.finishDeferredParse(bucket: "notes", key: "new") == nil)
        }
    }

    /// Renamed before it was parsed: the value goes under the new name, the old one is removed.
    @Test func aRenameBeforeTheParseMovesTheSave() throws {
        try withStore { store, _ in
            try seed(store, key: "a", version: 1, data: ["n": 1])
            _ = try store.applyJournaledEdits(
                [Journal.save(1, "a", #"{"n": 2}"#), Journal.rename(2, .entity(key: "a"), to: .entity(key: "b"))], parsingLaterFrom: 1)
            for key in try store.entitiesParsedLater().map(\.key) { _ = try store.finishDeferredParse(bucket: "notes", key: key) }
            #expect(try store.lookup(bucket: "notes", name: .entity(key: "a")) == nil)
            #expect(try store.entity(bucket: "notes", key: "b")?.value == ["n": 2])
            #expect(try Self.owed(store) == ["a": .remove, "b": .modify(diff: wireDiff([:], ["n": 2]))])
        }
    }

    /// Bytes that turn out not to be JSON are kept, `invalid`, and nothing is sent for them.
    @Test func invalidBytesFoundLaterAreKeptAndShownInvalid() throws {
        try withStore { store, _ in
            try seed(store, key: "k", version: 1, data: ["a": 1])
            _ = try store.applyJournaledEdits([Journal.save(1, "k", "not json")], parsingLaterFrom: 1)
            let finished = try #require(try store.finishDeferredParse(bucket: "notes", key: "k"))
            #expect(finished.parseError != nil && finished.readyToSend == nil)
            let entity = try #require(try store.entity(bucket: "notes", key: "k"))
            #expect(entity.state == .invalid && entity.content == bytes("not json") && entity.value == ["a": 1])
            #expect(try store.outgoingChanges(bucket: "notes").isEmpty)
        }
    }

    /// A change too large for a message (`refuseChanges`) is refused as it is queued, as the
    /// engine would refuse it, and kept; one that fits is handed over; a save after it tries again.
    @Test func aChangeTooLargeForAMessageIsRefusedAsItIsQueued() throws {
        try withStore { store, _ in
            store.refuseChanges(largerThan: 40)
            let big = #"{"text": "a note longer than the limit"}"#
            _ = try store.applyJournaledEdits([Journal.save(1, "big", big), Journal.save(2, "small", #"{"n": 1}"#)], parsingLaterFrom: 1)
            let refused = try #require(try store.finishDeferredParse(bucket: "notes", key: "big"))
            #expect(refused.readyToSend == nil)
            let entity = try #require(try store.entity(bucket: "notes", key: "big"))
            #expect(entity.state == .rejected(code: 413) && entity.reason?.contains("too large to send") == true)
            #expect(entity.value == object(big) && entity.content == bytes(big))
            // Its diff (a creation's, known by its length: 37 bytes of text and 14) is not kept.
            let kept = try store.read { db in try Row.fetchAll(db, sql: "SELECT state, diff FROM pending_change") }
            #expect(kept.map { "\($0["state"] as String) \($0["diff"] as String?)" } == ["rejected:413 nil"])
            #expect(try store.finishDeferredParse(bucket: "notes", key: "small")?.readyToSend?.key == "small")
            // An edit whose diff is too large is refused the same way.
            try seed(store, key: "seeded", version: 1, data: ["text": "short"])
            _ = try store.applyJournaledEdits([Journal.save(3, "seeded", big)], parsingLaterFrom: 1)
            #expect(try store.finishDeferredParse(bucket: "notes", key: "seeded")?.readyToSend == nil)
            #expect(try store.entity(bucket: "notes", key: "seeded")?.state == .rejected(code: 413))
            #expect(try store.outgoingChanges(bucket: "notes").map(\.key) == ["small"])
            _ = try store.applyJournaledEdits([Journal.save(4, "big", #"{"text": "short"}"#)])
            #expect(try store.outgoingChanges(bucket: "notes").map(\.key).sorted() == ["big", "small"])
        }
    }

    /// A mount stopped before it parsed: the store still has the bytes and knows they wait, and
    /// remote data for the note, the first thing after reopening, still merges with them.
    @Test func whatWaitsOutlivesAReopening() throws {
        let directory = try TemporaryDirectory()
        defer { directory.cleanup() }
        var store = try SyncStore(path: directory.storePath)
        _ = try store.ensureBucket("notes")
        let base: JSONObject = ["a": 1, "b": 1]
        try seed(store, key: "k", version: 1, data: base)
        _ = try store.applyJournaledEdits([Journal.save(1, "k", #"{"a": 2, "b": 1}"#)], parsingLaterFrom: 1)
        try store.close()
        store = try SyncStore(path: directory.storePath)
        defer { try? store.close() }
        #expect(try store.entitiesParsedLater().map(\.key) == ["k"])
        _ = try store.applyRemote(
            bucket: "notes",
            changes: [RemoteChange(key: "k", operation: .modify(diff: wireDiff(base, ["a": 1, "b": 3])), sourceVersion: 1, endVersion: 2, cv: "c2")])
        #expect(try store.entity(bucket: "notes", key: "k")?.value == ["a": 2, "b": 3])
        #expect(try store.entitiesParsedLater().isEmpty)
    }
}

/// A change of a MiB or more is handed to the engine without its diff decoded (`leftInStore`):
/// the engine reads it back when it sends it, and one too large for a message stays undecoded.
@Suite("large changes left in the store", .timeLimit(.minutes(2)))
struct LargeChangeHandOverTests {
    @Test func aLargeChangeIsDecodedOnlyWhenItIsSentAndFits() throws {
        try withStore { store, _ in
            let big: JSONObject = ["s": .string(String(repeating: "x", count: SyncStore.handedDecodedUpTo))]
            let handed = try #require(try store.saveLocal(bucket: "notes", key: "big", value: big).readyToSend)
            #expect(handed.leftInStore && handed.leastRequestBytes > SyncStore.handedDecodedUpTo)
            let tooLarge = try store.markSent([handed], decodingAtMost: SyncStore.handedDecodedUpTo)
            #expect(tooLarge.map(\.leftInStore) == [true] && tooLarge.first?.state == .sent)
            let sent = try store.markSent([handed])
            #expect(sent.map(\.leftInStore) == [false] && sent.first?.operation == .modify(diff: wireDiff([:], big)))

            let small = try #require(try store.saveLocal(bucket: "notes", key: "small", value: ["n": 1]).readyToSend)
            #expect(!small.leftInStore && small.operation == .modify(diff: wireDiff([:], ["n": 1])))
            // A save that hands its change straight to a connection gets it decoded.
            let direct = try #require(try store.saveLocal(bucket: "notes", key: "direct", value: big, markingSent: true).readyToSend)
            #expect(!direct.leftInStore && direct.state == .sent && direct.operation == .modify(diff: wireDiff([:], big)))
        }
    }
}
