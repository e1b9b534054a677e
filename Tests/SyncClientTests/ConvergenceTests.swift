import Foundation
import JSONDiff
import SyncEngine
import SyncStore
import Testing
@testable import SyncClient

@Suite("SyncClient against the real server", .serialized, .timeLimit(.minutes(2)))
struct ConvergenceTests {
    @Test func twoClientsConverge() async throws {
        try await SyncFixture.run { fixture in
            let (a, b) = try await fixture.startedPair()
            let events = b.client.remoteEvents()
            let saved = try await a.client.save(bucket: "notes", key: "hello", value: ["title": "from a"])
            #expect(saved.entity.state == .pending)
            #expect(await a.client.waitUntilAcknowledged(bucket: "notes", key: "hello", timeout: .seconds(60)) == .synced)
            #expect(try await eventually { try b.value("hello") == ["title": "from a"] })
            var iterator = events.makeAsyncIterator()
            let event = await iterator.next()
            #expect(event?.key == "hello")
            // The file on b is the rendered object.
            #expect(try b.client.read(bucket: "notes", key: "hello") == Array("{\n  \"title\": \"from a\"\n}\n".utf8))
            _ = try await b.client.save(bucket: "notes", key: "hello", value: ["title": "from b", "n": 1])
            #expect(try await eventually { try a.value("hello") == ["title": "from b", "n": 1] })
            try await a.idle()
            #expect(try a.store.entity(bucket: "notes", key: "hello")?.state == .synced)
            try await b.client.delete(bucket: "notes", key: "hello")
            #expect(try await eventually { try a.store.entity(bucket: "notes", key: "hello") == nil })
            #expect(a.client.connectionState == .connected)
        }
    }

    @Test func firstSyncPagesTheIndexAndReportsProgress() async throws {
        try await SyncFixture.run { fixture in
            let a = try await fixture.client("a")
            let b = try await fixture.client("b") { $0.indexPageLimit = 7 }
            await a.client.start()
            try await a.idle()
            for index in 0..<25 {
                _ = try await a.client.save(bucket: "notes", key: "item\(index)", value: ["i": .integer(Int64(index))])
            }
            try await a.idle(.seconds(20))
            let progress = b.client.progress()
            await b.client.start()
            try await b.idle(.seconds(20))
            #expect(try b.client.list(bucket: "notes").count == 25)
            #expect(try b.value("item17") == ["i": 17])
            var last: SyncProgress?
            for await update in progress {
                last = update
                if update.isReady { break }
            }
            #expect(last?.entitiesKnown == 25)
            #expect(last?.entitiesDone == 25)
            // A restart with a stored cv catches up instead of reloading the index.
            await b.client.stop()
            _ = try await a.client.save(bucket: "notes", key: "item3", value: ["i": 333])
            try await a.idle()
            await b.client.start()
            #expect(try await eventually { try b.value("item3") == ["i": 333] })
        }
    }

    @Test func offlineEditsOnDifferentFieldsMerge() async throws {
        try await offlineMerge(
            base: ["a": "1", "b": "1"], editA: ["a": "A", "b": "1"], editB: ["a": "1", "b": "B"],
            expected: ["a": "A", "b": "B"])
    }

    @Test func offlineEditsOnTheSameStringFieldMerge() async throws {
        try await offlineMerge(
            base: ["text": "hello world"], editA: ["text": "hello brave world"], editB: ["text": "hello world!"],
            expected: ["text": "hello brave world!"])
    }

    func offlineMerge(base: JSONObject, editA: JSONObject, editB: JSONObject, expected: JSONObject) async throws {
        try await SyncFixture.run { fixture in
            let (a, b) = try await fixture.startedPair(waitUntilIdle: false)
            _ = try await a.client.save(bucket: "notes", key: "doc", value: base)
            #expect(try await eventually { try b.value("doc") == base })
            try await a.idle()
            try await b.idle()
            await a.client.stop()
            await b.client.stop()
            _ = try await a.client.save(bucket: "notes", key: "doc", value: editA)
            _ = try await b.client.save(bucket: "notes", key: "doc", value: editB)
            await a.client.start()
            try await a.idle()
            await b.client.start()
            try await b.idle()
            #expect(try await eventually { try a.value("doc") == expected && b.value("doc") == expected })
            #expect(try a.store.entity(bucket: "notes", key: "doc")?.state == .synced)
            #expect(try b.store.entity(bucket: "notes", key: "doc")?.state == .synced)
        }
    }

    @Test func serverRestartMidChange() async throws {
        try await SyncFixture.run { fixture in
            let server = fixture.server
            let (a, b) = try await fixture.startedPair()
            // A save races the server going down; another is made while it is down.
            _ = try await a.client.save(bucket: "notes", key: "racing", value: ["v": 1])
            await server.stop()
            _ = try await a.client.save(bucket: "notes", key: "offline", value: ["v": 2])
            #expect(try await eventually {
                if case .offline = a.client.connectionState { return true } else { return false }
            })
            try await server.start()
            await a.client.reconnectNow()
            await b.client.reconnectNow()
            #expect(try await eventually {
                try b.value("racing") == ["v": 1] && b.value("offline") == ["v": 2]
            })
            try await a.idle()
            #expect(try a.store.outgoingChanges(bucket: "notes").isEmpty)
        }
    }

    @Test func restartedClientResendsPendingChangeWithItsCCID() async throws {
        try await SyncFixture.run { fixture in
            var a = try await fixture.client("a")
            let b = try await fixture.client("b")
            // Saved while never connected, the store closed ("process exit"), then reopened.
            let saved = try await a.client.save(bucket: "notes", key: "k", value: ["x": 1])
            let ccid = try #require(saved.readyToSend?.ccid)
            await a.shutdown()
            a = try await fixture.client("a")
            #expect(try a.store.outgoingChanges(bucket: "notes").map(\.ccid) == [ccid])
            await a.client.start()
            await b.client.start()
            #expect(try await eventually { try b.value("k") == ["x": 1] })
            try await a.idle()
        }
    }

    @Test func forgottenCVReindexesAndKeepsLocalPendingChanges() async throws {
        // The server keeps only a few changes, so an old cv is answered with `cv:?`.
        try await SyncFixture.run(server: { $0.changeLogRetention = 2 }) { fixture in
            let (a, b) = try await fixture.startedPair(waitUntilIdle: false)
            _ = try await a.client.save(bucket: "notes", key: "doc", value: ["a": 0, "b": 0])
            _ = try await a.client.save(bucket: "notes", key: "gone", value: ["x": 1])
            #expect(try await eventually { try b.value("doc") != nil && b.value("gone") != nil })
            try await b.idle()
            await b.client.stop()
            _ = try await b.client.save(bucket: "notes", key: "doc", value: ["a": 0, "b": 2])
            _ = try await b.client.save(bucket: "notes", key: "local-only", value: ["new": true])
            for index in 1...8 {
                _ = try await a.client.save(bucket: "notes", key: "doc", value: ["a": .integer(Int64(index)), "b": 0])
                try await a.idle()
            }
            try await a.client.delete(bucket: "notes", key: "gone")
            try await a.idle()
            let oldCV = try #require(try b.store.bucket(named: "notes")?.cv)
            await b.client.start()
            try await b.idle(.seconds(20))
            #expect(try b.store.bucket(named: "notes")?.cv != oldCV)
            #expect(try await eventually {
                try a.value("doc") == ["a": 8, "b": 2] && b.value("doc") == ["a": 8, "b": 2]
            })
            #expect(try b.store.entity(bucket: "notes", key: "gone") == nil)
            #expect(try await eventually { try a.value("local-only") == ["new": true] })
        }
    }

    @Test func firstCommandInsideInitWorksAgainstTheServer() async throws {
        try await SyncFixture.run { fixture in
            let a = try await fixture.client("a") { $0.sendCommandInInit = true }
            let b = try await fixture.client("b") { $0.sendCommandInInit = true }
            await a.client.start()
            try await a.idle()
            _ = try await a.client.save(bucket: "notes", key: "k", value: ["v": 1])
            try await a.idle()
            await b.client.start()
            #expect(try await eventually { try b.value("k") == ["v": 1] })
            await b.client.stop()
            _ = try await a.client.save(bucket: "notes", key: "k", value: ["v": 2])
            await b.client.start()
            #expect(try await eventually { try b.value("k") == ["v": 2] })
        }
    }

    @Test func heartbeatsKeepAnIdleConnectionUp() async throws {
        try await SyncFixture.run { fixture in
            let a = try await fixture.client("a") {
                $0.heartbeatInterval = .milliseconds(100)
                $0.heartbeatTimeout = .milliseconds(300)
            }
            let b = try await fixture.client("b")
            await a.client.start()
            try await a.idle()
            let states = a.client.connectionStates()
            // Idle for many heartbeat intervals: the server answers each `h`, nothing reconnects.
            try await Task.sleep(for: .milliseconds(1500))
            #expect(a.client.connectionState == .connected)
            await b.client.start()
            _ = try await b.client.save(bucket: "notes", key: "k", value: ["v": 1])
            #expect(try await eventually { try a.value("k") == ["v": 1] })
            await a.client.stop()
            var seen: [ConnectionState] = []
            for await state in states {
                seen.append(state)
                if state == .stopped { break }
            }
            #expect(seen.first == .connected)
            #expect(!seen.contains { if case .offline = $0 { return true } else { return false } })
        }
    }

    @Test func bucketAddedWhileConnectedSyncs() async throws {
        try await SyncFixture.run { fixture in
            let a = try await fixture.client("a")
            let b = try await fixture.client("b", buckets: ["notes", "todo"])
            await a.client.start()
            await b.client.start()
            try await a.idle()
            try await a.client.addBucket("todo")
            #expect(await a.client.buckets == ["notes", "todo"])
            _ = try await a.client.save(bucket: "todo", key: "task", value: ["done": false])
            #expect(try await eventually { try b.value("task", bucket: "todo") == ["done": false] })
            await #expect(throws: SyncClientError.self) { try await a.client.addBucket("bad/name") }
        }
    }

    @Test func removedBucketStopsSyncingOnlyWhenEmptyAndCanComeBack() async throws {
        try await SyncFixture.run { fixture in
            let a = try await fixture.client("a", buckets: ["notes", "todo"])
            let b = try await fixture.client("b", buckets: ["notes", "todo"])
            await a.client.start()
            await b.client.start()
            try await a.idle()
            try await b.idle()
            _ = try await a.client.save(bucket: "todo", key: "task", value: ["done": false])
            try await a.idle()
            await #expect(throws: SyncClientError.store(.bucketNotEmpty("todo"))) { try await a.client.removeBucket("todo") }
            try await a.client.delete(bucket: "todo", key: "task")
            try await a.idle()
            try await a.client.removeBucket("todo")
            #expect(await a.client.buckets == ["notes"])
            #expect(try a.client.store.bucket(named: "todo") == nil)
            // Changes to the removed bucket no longer reach this client; the others still flow.
            _ = try await b.client.save(bucket: "todo", key: "later", value: ["n": 1])
            _ = try await b.client.save(bucket: "notes", key: "n", value: ["n": 2])
            #expect(try await eventually { try a.value("n") == ["n": 2] })
            #expect(try a.client.store.bucket(named: "todo") == nil)
            #expect(await a.client.waitUntilIdle(timeout: .seconds(60)))
            // Made again, it loads what the server holds.
            try await a.client.addBucket("todo")
            #expect(try await eventually { try a.value("later", bucket: "todo") == ["n": 1] })
        }
    }

    @Test func badTokenIsAClearAuthFailure() async throws {
        try await SyncFixture.run { fixture in
            let bad = try await fixture.client("bad", token: String(repeating: "z", count: 40))
            let malformed = try await fixture.client("malformed", token: "short")
            let badFailures = bad.client.authFailures()
            let malformedFailures = malformed.client.authFailures()
            await bad.client.start()
            await malformed.client.start()
            var iterator = badFailures.makeAsyncIterator()
            let failure = await iterator.next()
            if case .invalidToken? = failure?.failure {} else { Issue.record("expected invalidToken, got \(String(describing: failure))") }
            var other = malformedFailures.makeAsyncIterator()
            let second = await other.next()
            #expect(second?.failure != nil)
            if case .invalidToken? = second?.failure { Issue.record("a malformed token is not reported as a bad token") }
            // Local work continues offline.
            _ = try await bad.client.save(bucket: "notes", key: "k", value: ["ok": true])
            #expect(try bad.value("k") == ["ok": true])
        }
    }
}
