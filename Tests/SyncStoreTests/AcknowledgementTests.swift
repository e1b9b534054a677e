import Foundation
import GRDB
import JSONDiff
import Testing
@testable import SyncStore

/// The acknowledgement of our own change, applied from what was sent (`SentChanges`), leaves
/// the store exactly as the general path does (parse the ghost, apply the server's diff, diff
/// the local value against it). Each scenario runs twice, in two stores: one remembers what it
/// sent; the other forgets it before the acknowledgement, as after a restart, so the general
/// path answers. Their rows must be equal, column by column.
@Suite("acknowledgement of our own change", .timeLimit(.minutes(1)))
struct AcknowledgementTests {
    /// One of the two stores of a scenario.
    struct Side {
        let store: SyncStore
        let remembers: Bool

        /// Marks the change sent (it goes out), as the engine does before writing it.
        func send(_ change: OutgoingChange) throws {
            try store.markSent([change])
            if !remembers { _ = store.sentChanges.take(ccid: change.ccid) }
        }

        /// The server's echo of `change` as it applied it: the same diff over the same version.
        func acknowledge(_ change: OutgoingChange, endVersion: Int, cv: String) throws -> RemoteOutcome {
            guard case .modify(let diff) = change.operation else { throw StoreError.corruptRow("not a modify") }
            return try store.applyRemote(
                bucket: "notes",
                changes: [
                    RemoteChange(
                        key: change.key, operation: .modify(diff: diff), sourceVersion: change.sourceVersion,
                        endVersion: endVersion, cv: cv, clientID: "us", ccids: [change.ccid])
                ])
        }

        func owed() throws -> [OutgoingChange] { try store.outgoingChanges(bucket: "notes") }

        /// Every stored column a sync decision rests on (times, ids and ccids differ between the
        /// two stores by nature; they are compared within one store where they matter).
        func rows() throws -> [String] {
            try store.read { db in
                let entities = try Row.fetchAll(
                    db,
                    sql: """
                        SELECT key, ghost_version, ghost_data, local_value, file_size,
                        (SELECT bytes FROM entity_content WHERE entity_id = entity.id) AS content, state, reason, deleted_pending,
                        reload_version, needs_reload FROM entity ORDER BY key
                        """)
                let changes = try Row.fetchAll(
                    db,
                    sql: """
                        SELECT e.key, c.sv, c.op, c.diff, c.full_data, c.state FROM pending_change c
                        JOIN entity e ON e.id = c.entity_id ORDER BY e.key, c.seq
                        """)
                return entities.map { "entity \($0)" } + changes.map { "change \($0)" }
            }
        }
    }

    /// Runs `scenario` on a store that remembers what it sent and on one that does not, and
    /// expects the same rows; returns them for the scenario's own expectations.
    @discardableResult
    func bothWays(
        format: (any EntityFileFormat)? = nil, _ scenario: (Side) throws -> Void
    ) throws -> (fast: SyncStore, rows: [String], cleanup: () -> Void) {
        var results: [[String]] = []
        var kept: (SyncStore, TemporaryDirectory)?
        for remembers in [true, false] {
            let directory = try TemporaryDirectory()
            let store = try SyncStore(path: directory.storePath)
            _ = try store.ensureBucket("notes")
            if let format { try store.setFileFormat(format, forBucket: "notes") }
            let side = Side(store: store, remembers: remembers)
            try scenario(side)
            results.append(try side.rows())
            if remembers {
                kept = (store, directory)
            } else {
                try store.close()
                directory.cleanup()
            }
        }
        #expect(results[0] == results[1])
        let (store, directory) = try #require(kept)
        return (store, results[0], { try? store.close(); directory.cleanup() })
    }

    @Test func noLocalEditSinceSent() throws {
        let (store, _, cleanup) = try bothWays { side in
            let change = try #require(try side.store.saveLocal(bucket: "notes", key: "a", value: ["title": "one", "n": 1]).readyToSend)
            try side.send(change)
            if side.remembers { #expect(side.store.sentChanges.count == 1) }
            let before = try #require(try side.store.entity(bucket: "notes", key: "a"))
            let outcome = try side.acknowledge(change, endVersion: 1, cv: "c1")
            #expect(outcome.acknowledged == [change.ccid])
            #expect(outcome.readyToSend.isEmpty)
            let after = try #require(try side.store.entity(bucket: "notes", key: "a"))
            #expect(after.state == .synced)
            #expect(after.version == 1)
            #expect(after.ghost == ["title": "one", "n": 1])
            #expect(after.value == after.ghost)
            // An acknowledgement changes no byte and no time of the file.
            #expect(after.content == before.content && after.mtime == before.mtime && after.ctime == before.ctime)
            #expect(try side.owed().isEmpty)

            // And the next save diffs from the acknowledged ghost.
            let next = try #require(try side.store.saveLocal(bucket: "notes", key: "a", value: ["title": "two", "n": 1]).readyToSend)
            #expect(next.sourceVersion == 1)
            #expect(next.operation == .modify(diff: wireDiff(["title": "one", "n": 1], ["title": "two", "n": 1])))
            try side.send(next)
            _ = try side.acknowledge(next, endVersion: 2, cv: "c2")
            #expect(try side.store.entity(bucket: "notes", key: "a")?.ghost == ["title": "two", "n": 1])
            #expect(try side.store.entity(bucket: "notes", key: "a")?.state == .synced)
        }
        defer { cleanup() }
        #expect(store.sentChanges.count == 0)
    }

    @Test func localEditMadeWhileInFlightIsSentNext() throws {
        let (_, rows, cleanup) = try bothWays { side in
            _ = try seed(side.store, key: "a", version: 3, data: ["body": "hello world", "tags": ["x"]])
            let first = try #require(try side.store.saveLocal(bucket: "notes", key: "a", value: ["body": "hello brave world", "tags": ["x"]]).readyToSend)
            try side.send(first)
            // Saved again while the first is on its way: waits for the acknowledgement.
            #expect(try side.store.saveLocal(bucket: "notes", key: "a", value: ["body": "hello brave new world", "tags": ["x", "y"]]).readyToSend?.ccid == first.ccid)
            let outcome = try side.acknowledge(first, endVersion: 4, cv: "c4")
            let next = try #require(outcome.readyToSend.first)
            #expect(next.ccid != first.ccid)
            #expect(next.sourceVersion == 4)
            #expect(next.operation == .modify(diff: wireDiff(
                ["body": "hello brave world", "tags": ["x"]], ["body": "hello brave new world", "tags": ["x", "y"]])))
            let entity = try #require(try side.store.entity(bucket: "notes", key: "a"))
            #expect(entity.ghost == ["body": "hello brave world", "tags": ["x"]])
            #expect(entity.version == 4)
            #expect(entity.value == ["body": "hello brave new world", "tags": ["x", "y"]])
            #expect(entity.state == .pending)
            try side.send(next)
            _ = try side.acknowledge(next, endVersion: 5, cv: "c5")
            #expect(try side.store.entity(bucket: "notes", key: "a")?.state == .synced)
        }
        cleanup()
        #expect(rows.contains { $0.contains("hello brave new world") })
    }

    @Test func remoteChangeBeforeTheAcknowledgementIsMerged() throws {
        try bothWays { side in
            _ = try seed(side.store, key: "a", version: 1, data: ["title": "t", "body": "b"])
            let ours = try #require(try side.store.saveLocal(bucket: "notes", key: "a", value: ["title": "ours", "body": "b"]).readyToSend)
            try side.send(ours)
            // Another client's change reached the server first: ours is rebased there (sv 2).
            _ = try side.store.applyRemote(
                bucket: "notes",
                changes: [
                    RemoteChange(
                        key: "a", operation: .modify(diff: wireDiff(["title": "t", "body": "b"], ["title": "t", "body": "theirs"])),
                        sourceVersion: 1, endVersion: 2, cv: "c2", clientID: "them")
                ])
            #expect(try side.store.entity(bucket: "notes", key: "a")?.value == ["title": "ours", "body": "theirs"])
            _ = try side.store.applyRemote(
                bucket: "notes",
                changes: [
                    RemoteChange(
                        key: "a", operation: .modify(diff: wireDiff(["title": "t", "body": "theirs"], ["title": "ours", "body": "theirs"])),
                        sourceVersion: 2, endVersion: 3, cv: "c3", clientID: "us", ccids: [ours.ccid])
                ])
            let entity = try #require(try side.store.entity(bucket: "notes", key: "a"))
            #expect(entity.ghost == ["title": "ours", "body": "theirs"])
            #expect(entity.value == entity.ghost)
            #expect(entity.version == 3)
            #expect(entity.state == .synced)
            #expect(try side.owed().isEmpty)
        }.cleanup()
    }

    @Test func editsOfOneFieldOnBothSidesMergeAsTheGeneralPathDoes() throws {
        try bothWays { side in
            _ = try seed(side.store, key: "a", version: 1, data: ["n": 1, "text": "abc"])
            let ours = try #require(try side.store.saveLocal(bucket: "notes", key: "a", value: ["n": 2, "text": "abcd"]).readyToSend)
            try side.send(ours)
            let theirs: JSONObject = ["n": 5, "text": "xabc"]
            _ = try side.store.applyRemote(
                bucket: "notes",
                changes: [
                    RemoteChange(
                        key: "a", operation: .modify(diff: wireDiff(["n": 1, "text": "abc"], theirs)), sourceVersion: 1,
                        endVersion: 2, cv: "c2", clientID: "them")
                ])
            // The server rebased ours over theirs as this store did, and echoes the net diff over 2.
            let merged = try #require(try side.store.entity(bucket: "notes", key: "a")?.value)
            #expect(merged["text"] == .string("xabcd"))
            _ = try side.store.applyRemote(
                bucket: "notes",
                changes: [
                    RemoteChange(
                        key: "a", operation: .modify(diff: wireDiff(theirs, merged)), sourceVersion: 2, endVersion: 3,
                        cv: "c3", clientID: "us", ccids: [ours.ccid])
                ])
            let entity = try #require(try side.store.entity(bucket: "notes", key: "a"))
            #expect(entity.ghost == merged)
            #expect(entity.value == merged)
            #expect(entity.version == 3)
            #expect(entity.state == .synced)
        }.cleanup()
    }

    @Test func echoThatIsNotWhatWasSentTakesTheGeneralPath() throws {
        // Same source version, another diff (a server that normalized it): the ghost follows
        // the server, and the difference to the local value goes out as the next change.
        let (store, _, cleanup) = try bothWays { side in
            _ = try seed(side.store, key: "a", version: 1, data: ["a": 1])
            let ours = try #require(try side.store.saveLocal(bucket: "notes", key: "a", value: ["a": 2]).readyToSend)
            try side.send(ours)
            _ = try side.store.applyRemote(
                bucket: "notes",
                changes: [
                    RemoteChange(
                        key: "a", operation: .modify(diff: wireDiff(["a": 1], ["a": 2, "b": true])), sourceVersion: 1,
                        endVersion: 2, cv: "c2", clientID: "us", ccids: [ours.ccid])
                ])
            let entity = try #require(try side.store.entity(bucket: "notes", key: "a"))
            #expect(entity.ghost == ["a": 2, "b": true])
            #expect(entity.value == ["a": 2])
            let next = try #require(try side.owed().first)
            #expect(next.operation == .modify(diff: wireDiff(["a": 2, "b": true], ["a": 2])))
        }
        defer { cleanup() }
        #expect(store.sentChanges.count == 0)
    }

    @Test func resentAfterReconnectIsAcknowledgedOnce() throws {
        try bothWays { side in
            let change = try #require(try side.store.saveLocal(bucket: "notes", key: "a", value: ["x": "y"]).readyToSend)
            try side.send(change)
            // The connection dropped; the catch-up finds the change still owed and sends it again.
            let owed = try side.store.finishCatchUp(bucket: "notes")
            #expect(owed.map(\.ccid) == [change.ccid])
            #expect(owed.first?.state == .sent)
            try side.send(try #require(owed.first))
            if side.remembers { #expect(side.store.sentChanges.count == 1) }
            _ = try side.acknowledge(change, endVersion: 1, cv: "c1")
            // The server's 409 for the second copy changes nothing.
            #expect(try side.store.reject(bucket: "notes", ccid: change.ccid, code: 409) == .none)
            let entity = try #require(try side.store.entity(bucket: "notes", key: "a"))
            #expect(entity.state == .synced)
            #expect(entity.version == 1)
            #expect(entity.ghost == ["x": "y"])
            #expect(try side.store.finishCatchUp(bucket: "notes").isEmpty)
        }.cleanup()
    }

    /// A save made while the change is in flight leaves it as it went; refused for now (5xx), it
    /// goes again unchanged. Its echo brings the ghost to what it carried, not to the later save,
    /// which goes next. (What was remembered at the resend used to be the local value by then:
    /// the echo made the entity "synced" at a value the server never had.)
    @Test func changeResentAfterAServerErrorBringsWhatItCarried() throws {
        try bothWays { side in
            _ = try seed(side.store, key: "a", version: 1, data: ["n": 1])
            let first = try #require(try side.store.saveLocal(bucket: "notes", key: "a", value: ["n": 2]).readyToSend)
            try side.send(first)
            _ = try side.store.saveLocal(bucket: "notes", key: "a", value: ["n": 3])
            guard case .resend(let again) = try side.store.reject(bucket: "notes", ccid: first.ccid, code: 503) else {
                Issue.record("503 is resent")
                return
            }
            #expect(again.ccid == first.ccid && again.operation == first.operation)
            try side.send(again)
            let outcome = try side.acknowledge(first, endVersion: 2, cv: "c2")
            let next = try #require(outcome.readyToSend.first)
            #expect(next.sourceVersion == 2)
            #expect(next.operation == .modify(diff: wireDiff(["n": 2], ["n": 3])))
            let entity = try #require(try side.store.entity(bucket: "notes", key: "a"))
            #expect(entity.ghost == ["n": 2])
            #expect(entity.value == ["n": 3])
            #expect(entity.state == .pending)
        }.cleanup()
    }

    @Test func changeRecreatedAfter404IsSentWholeAndAcknowledgedTheGeneralWay() throws {
        try bothWays { side in
            _ = try seed(side.store, key: "a", version: 2, data: ["a": 1])
            let ours = try #require(try side.store.saveLocal(bucket: "notes", key: "a", value: ["a": 2]).readyToSend)
            try side.send(ours)
            guard case .resend(let whole) = try side.store.reject(bucket: "notes", ccid: ours.ccid, code: 404) else {
                Issue.record("404 is resent")
                return
            }
            #expect(whole.sourceVersion == nil)
            #expect(whole.fullData == ["a": 2])
            try side.send(whole)
            _ = try side.store.applyRemote(
                bucket: "notes",
                changes: [
                    RemoteChange(
                        key: "a", operation: .modify(diff: wireDiff([:], ["a": 2])), sourceVersion: nil, endVersion: 1,
                        cv: "c1", clientID: "us", ccids: [ours.ccid])
                ])
            let entity = try #require(try side.store.entity(bucket: "notes", key: "a"))
            #expect(entity.version == 1)
            #expect(entity.ghost == ["a": 2])
            #expect(entity.state == .synced)
        }.cleanup()
    }

    @Test func invalidBytesSavedWhileInFlightStayInvalid() throws {
        try bothWays { side in
            let change = try #require(try side.store.saveLocal(bucket: "notes", key: "a", bytes: bytes("{\"a\": 1}")).readyToSend)
            try side.send(change)
            _ = try side.store.saveLocal(bucket: "notes", key: "a", bytes: bytes("{\"a\": "))
            _ = try side.acknowledge(change, endVersion: 1, cv: "c1")
            let entity = try #require(try side.store.entity(bucket: "notes", key: "a"))
            #expect(entity.state == .invalid)
            #expect(entity.ghost == ["a": 1])
            #expect(entity.content == bytes("{\"a\": "))
            #expect(try side.owed().isEmpty)
        }.cleanup()
    }

    @Test func textViewBucketSavesAndMergesTheSame() throws {
        let format = TextFieldFormat(field: "content")
        let (_, rows, cleanup) = try bothWays(format: format) { side in
            _ = try seed(side.store, key: "n", version: 1, data: ["content": "first line\n", "tags": ["a"]])
            let ours = try #require(try side.store.saveLocal(bucket: "notes", key: "n", bytes: bytes("first line\nsecond\n")).readyToSend)
            try side.send(ours)
            _ = try side.store.saveLocal(bucket: "notes", key: "n", bytes: bytes("first line\nsecond\nthird\n"))
            let outcome = try side.acknowledge(ours, endVersion: 2, cv: "c2")
            let next = try #require(outcome.readyToSend.first)
            try side.send(next)
            _ = try side.acknowledge(next, endVersion: 3, cv: "c3")
            let entity = try #require(try side.store.entity(bucket: "notes", key: "n"))
            #expect(entity.state == .synced)
            #expect(entity.content == bytes("first line\nsecond\nthird\n"))
            #expect(entity.ghost["content"] == .string("first line\nsecond\nthird\n"))
            #expect(entity.ghost["tags"] == .array([.string("a")]))
            #expect(entity.value == entity.ghost)
        }
        cleanup()
        #expect(rows.contains { $0.contains("third") })
    }

    @Test func rememberedChangesAreBoundedInCountAndBytes() throws {
        let table = SentChanges()
        for index in 0..<(SentChanges.capacity + 10) {
            table.remember(ccid: "c\(index)", SentChanges.Sent(sourceVersion: nil, diff: "{}", ghost: "{}", result: "{}"))
        }
        #expect(table.count == SentChanges.capacity)
        #expect(table.bytes == SentChanges.capacity * 6)
        #expect(table.take(ccid: "c\(SentChanges.capacity + 9)") != nil)

        // Large values make room by their size; one past the whole bound is not held at all.
        let large = String(repeating: "x", count: SentChanges.byteCapacity / 4)
        for index in 0..<8 {
            table.remember(ccid: "large\(index)", SentChanges.Sent(sourceVersion: 1, diff: "{}", ghost: large, result: large))
        }
        #expect(table.bytes <= SentChanges.byteCapacity)
        #expect(table.take(ccid: "large7") != nil)
        let huge = String(repeating: "y", count: SentChanges.byteCapacity)
        table.remember(ccid: "huge", SentChanges.Sent(sourceVersion: 1, diff: "{}", ghost: "{}", result: huge))
        #expect(table.take(ccid: "huge") == nil)
        // Remembering a change again replaces it and counts it once.
        table.remember(ccid: "again", SentChanges.Sent(sourceVersion: 1, diff: "{}", ghost: "{}", result: "{}"))
        let once = table.bytes
        table.remember(ccid: "again", SentChanges.Sent(sourceVersion: 2, diff: "{}", ghost: "{}", result: "{}"))
        #expect(table.bytes == once)
        #expect(table.take(ccid: "again")?.sourceVersion == 2)
        #expect(table.bytes == once - 6)
    }
}
