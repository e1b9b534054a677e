import Foundation
import JSONDiff
import Testing
@testable import SyncStore

@Suite("index pages in bulk", .timeLimit(.minutes(2)))
struct IndexPageTests {
    static func note(_ index: Int) -> JSONObject {
        ["title": .string("note \(index)"), "body": .string(String(repeating: "lorem ipsum ", count: 80)), "n": .integer(Int64(index))]
    }

    @Test func largePagesStoreEveryEntityOnceWithDistinctIDsAndEvents() async throws {
        try withStore { store, _ in
            let events = store.remoteEvents()
            try store.beginIndex(bucket: "notes")
            let total = 3_000
            var created: [RemoteEvent] = []
            for start in stride(from: 0, to: total, by: 1_000) {
                let entries = (start..<start + 1_000).map { IndexEntry(key: String(format: "k%05d", $0), version: 1 + $0 % 3, data: Self.note($0)) }
                let outcome = try store.applyIndexPage(bucket: "notes", entries: entries, current: "cv9", isLast: start + 1_000 == total)
                #expect(outcome.reloads.isEmpty)
                #expect(outcome.readyToSend.isEmpty)
                created += outcome.events
            }
            #expect(created.count == total)
            #expect(Set(created.map(\.entityID)).count == total)
            #expect(created.allSatisfy { $0.kind == .created && $0.version != nil })
            #expect(try store.bucket(named: "notes")?.cv == "cv9")
            let stats = try store.stats()
            #expect(stats.entities == total)
            #expect(stats.byState == ["synced": total])
            #expect(stats.queuedChanges == 0)
            let sample = try #require(try store.entity(bucket: "notes", key: "k01234"))
            #expect(sample.version == 1 + 1234 % 3)
            #expect(sample.ghost == Self.note(1234))
            #expect(sample.value == Self.note(1234))
            #expect(sample.content == Array(JSONValue.object(Self.note(1234)).prettyRendered().utf8))
            // Node ids handed out in blocks do not collide with later ones.
            let later = try store.saveLocal(bucket: "notes", key: "new", bytes: bytes(#"{"a":1}"#))
            #expect(!created.map(\.entityID).contains(later.entity.id))
            _ = events
        }
    }

    /// Batches carry the same events as the one-by-one stream, one batch per transaction.
    @Test func eventBatchesAreTheTransactionsOfTheEventStream() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.cleanup() }
        let store = try SyncStore(path: directory.storePath)
        _ = try store.ensureBucket("notes")
        let each = store.remoteEvents()
        let batches = store.remoteEventBatches()
        try store.beginIndex(bucket: "notes")
        var expected: [[RemoteEvent]] = []
        for start in stride(from: 0, to: 1_500, by: 500) {
            let entries = (start..<start + 500).map { IndexEntry(key: "k\($0)", version: 1, data: Self.note($0)) }
            expected.append(try store.applyIndexPage(bucket: "notes", entries: entries, current: "c1", isLast: start == 1_000).events)
        }
        let removal = try store.applyRemote(
            bucket: "notes", changes: [RemoteChange(key: "k3", operation: .remove, sourceVersion: 1, endVersion: 2, cv: "c2")])
        expected.append(removal.events)
        // A save here publishes nothing: only the server's changes are remote events.
        _ = try store.saveLocal(bucket: "notes", key: "mine", bytes: bytes(#"{"a":1}"#))
        try store.close()
        var received: [[RemoteEvent]] = []
        for await batch in batches { received.append(batch) }
        var oneByOne: [RemoteEvent] = []
        for await event in each { oneByOne.append(event) }
        #expect(received.map(\.count) == [500, 500, 500, 1])
        #expect(received == expected)
        #expect(oneByOne == expected.flatMap { $0 })
    }

    /// A subscriber that takes nothing holds at most `eventBufferLimit` events, in whole
    /// batches, and gets the next ones once it has taken those.
    @Test func aSubscriberThatFallsBehindHoldsBoundedEvents() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.cleanup() }
        let store = try SyncStore(path: directory.storePath)
        _ = try store.ensureBucket("notes")
        let batches = store.remoteEventBatches()
        var iterator = batches.makeAsyncIterator()
        try store.beginIndex(bucket: "notes")
        let pageSize = 1_000
        func page(_ number: Int) throws {
            let entries = (0..<pageSize).map { IndexEntry(key: "p\(number)-\($0)", version: 1, data: ["n": .integer(Int64($0))]) }
            _ = try store.applyIndexPage(bucket: "notes", entries: entries, current: "c1", isLast: false)
        }
        for number in 0..<15 { try page(number) }
        var held: [[RemoteEvent]] = []
        for _ in 0..<(SyncStore.eventBufferLimit / pageSize) { held.append(try #require(await iterator.next())) }
        #expect(held.allSatisfy { $0.count == pageSize })
        #expect(held.map { $0.first?.key } == (0..<10).map { "p\($0)-0" })
        // Taken, they make room: the next page arrives.
        try page(15)
        let next = try #require(await iterator.next())
        #expect(next.first?.key == "p15-0" && next.count == pageSize)
        try store.close()
        #expect(await iterator.next() == nil)
    }

    @Test func reindexSkipsKnownVersionsUpdatesChangedOnesAndChecksUnseen() throws {
        try withStore { store, _ in
            try store.beginIndex(bucket: "notes")
            let first = (0..<10).map { IndexEntry(key: "k\($0)", version: 1, data: Self.note($0)) }
            _ = try store.applyIndexPage(bucket: "notes", entries: first, current: "c1", isLast: true)
            // A local edit on k1 and on k2 (k2 is then removed on the server: kept and re-created).
            _ = try store.saveLocal(bucket: "notes", key: "k1", value: Self.note(1).merging(["local": true]) { $1 })
            _ = try store.saveLocal(bucket: "notes", key: "k2", value: Self.note(2).merging(["local": true]) { $1 })
            let untouchedID = try #require(try store.entity(bucket: "notes", key: "k0")?.id)

            try store.beginIndex(bucket: "notes")
            // k0 same version (skipped), k1 newer with data (rebased), k3 newer without data
            // (reload), k2 and k4...k9 gone, plus a duplicate key and a brand-new one.
            let second = [
                IndexEntry(key: "k0", version: 1, data: Self.note(0)),
                IndexEntry(key: "k1", version: 2, data: Self.note(1).merging(["remote": true]) { $1 }),
                IndexEntry(key: "k3", version: 5, data: nil),
                IndexEntry(key: "new", version: 1, data: ["x": 1]),
                IndexEntry(key: "new", version: 1, data: ["x": 1]),
            ]
            let outcome = try store.applyIndexPage(bucket: "notes", entries: second, current: "c2", isLast: true)
            // k4...k9 are asked for at the version this store had (a replica checks the server);
            // the server has those versions, so they were removed there since.
            let asked = (4..<10).map { ReloadRequest(key: "k\($0)", version: 1) }
            #expect(Set(outcome.reloads) == Set([ReloadRequest(key: "k3", version: 5)] + asked))
            for gone in 4..<10 {
                _ = try store.applyEntity(bucket: "notes", key: "k\(gone)", version: 1, data: Self.note(gone))
            }
            #expect(try store.entity(bucket: "notes", key: "k0")?.id == untouchedID)
            let k1 = try #require(try store.entity(bucket: "notes", key: "k1")?.value)
            #expect(k1["local"] == true)
            #expect(k1["remote"] == true)
            #expect(try store.entity(bucket: "notes", key: "k2")?.value?["local"] == true)
            #expect(try store.entity(bucket: "notes", key: "k3") != nil)
            #expect(try store.entity(bucket: "notes", key: "new")?.value == ["x": 1])
            for gone in 4..<10 { #expect(try store.entity(bucket: "notes", key: "k\(gone)") == nil) }
            #expect(try store.pendingReloads(bucket: "notes") == [ReloadRequest(key: "k3", version: 5)])
            #expect(try store.bucket(named: "notes")?.cv == "c2")
        }
    }

    @Test func remoteEventsCarryTheNewVersionAndTheChangingClient() throws {
        try withStore { store, _ in
            var outcome = try store.applyRemote(
                bucket: "notes",
                changes: [RemoteChange(key: "k", operation: .modify(diff: wireDiff([:], ["a": 1])), sourceVersion: nil, endVersion: 1, cv: "c1", clientID: "alice")])
            #expect(outcome.events == [RemoteEvent(bucket: "notes", key: "k", entityID: outcome.events.first?.entityID ?? -1, kind: .created, version: 1, clientID: "alice")])
            outcome = try store.applyRemote(
                bucket: "notes",
                changes: [RemoteChange(key: "k", operation: .modify(diff: wireDiff(["a": 1], ["a": 2])), sourceVersion: 1, endVersion: 2, cv: "c2", clientID: "bob")])
            #expect(outcome.events.map(\.version) == [2])
            #expect(outcome.events.map(\.clientID) == ["bob"])
            outcome = try store.applyRemote(
                bucket: "notes", changes: [RemoteChange(key: "k", operation: .remove, sourceVersion: 2, endVersion: 3, cv: "c3", clientID: "carol")])
            #expect(outcome.events.map(\.kind) == [.removed])
            #expect(outcome.events.map(\.version) == [3])
            #expect(outcome.events.map(\.clientID) == ["carol"])
            // `e` loads know the version but not who made it.
            _ = try store.applyRemote(
                bucket: "notes",
                changes: [RemoteChange(key: "m", operation: .modify(diff: wireDiff(["a": 1], ["a": 2])), sourceVersion: 4, endVersion: 5, cv: "c4")])
            outcome = try store.applyEntity(bucket: "notes", key: "m", version: 5, data: ["a": 2])
            #expect(outcome.events.map(\.version) == [5])
            #expect(outcome.events.map(\.clientID) == [nil])
        }
    }
}
