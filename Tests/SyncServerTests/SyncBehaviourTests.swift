import Foundation
import JSONDiff
import SyncProtocol
@testable import SyncServer
import Testing

@Suite(.timeLimit(.minutes(2)))
struct SyncBehaviourTests {
    @Test(arguments: StoreKind.allCases) func connectionsSeeEachOthersChangesWithCCIDsAndSV(store: StoreKind) async throws {
        try await withServer(store: store) { server in
            let token = try await makeUser(server)
            let first = try await server.socket()
            let second = try await server.socket()
            _ = try await first.authorize(token: token, clientID: "client-one")
            // Two channels on one connection, the second for the same bucket.
            _ = try await second.authorize(token: token, channel: 0, clientID: "client-two")
            _ = try await second.authorize(token: token, channel: 5, clientID: "client-two")

            let ccid = newCCID()
            first.send(changeFrame(key: "shared", diff: #"{"a":{"o":"+","v":1}}"#, ccid: ccid))
            let ack = try appliedChange(try await first.receiveMessage())
            // Both channels of the second connection get it, in no particular channel order.
            var byChannel: [Int: AppliedChange] = [:]
            for _ in 0..<2 {
                let message = try await second.receiveMessage()
                guard case .channel(let channel, _) = message else { throw TestFailure("unexpected \(message)") }
                byChannel[channel] = try appliedChange(message, channel: channel)
            }
            let seen = try #require(byChannel[0])
            let seenOnFive = try #require(byChannel[5])
            #expect(ack == seen)
            #expect(seen == seenOnFive)
            #expect(seen.ccids == [ccid])
            #expect(seen.clientID == "client-one")
            #expect(seen.sourceVersion == nil)

            second.send(changeFrame(key: "shared", diff: #"{"b":{"o":"+","v":2}}"#, sv: 1, ccid: "from-two"))
            let remote = try appliedChange(try await first.receiveMessage())
            #expect(remote.sourceVersion == 1)
            #expect(remote.endVersion == 2)
            #expect(remote.ccids == ["from-two"])
            #expect(remote.clientID == "client-two")
            #expect(try JSONDiffing.apply(try #require(remote.diff), to: ["a": 1]) == ["a": 1, "b": 2])
            _ = try await second.receive()
            _ = try await second.receive()
            await first.close()
            await second.close()
        }
    }

    @Test(arguments: StoreKind.allCases) func staleSourceVersionIsRebased(store: StoreKind) async throws {
        try await withServer(store: store) { server in
            let token = try await makeUser(server)
            let alice = try await server.socket()
            let other = try await server.socket()
            _ = try await alice.authorize(token: token, clientID: "a")
            _ = try await other.authorize(token: token, clientID: "b")
            try await create(alice, key: "doc", object: ["title": "hello world", "tags": "x"])
            _ = try await other.receive()

            // `other` edits the title at v1 -> v2.
            other.send(changeFrame(key: "doc", diff: #"{"title":{"o":"d","v":"=5\t+ there\t=6"}}"#, sv: 1, ccid: "edit-b"))
            _ = try await other.receive()
            _ = try await alice.receive()
            // `alice` still at v1 edits another key and the same text: rebased onto v2.
            let rebased = try appliedChange(try await alice.receiveMessage(after: changeFrame(
                key: "doc", diff: #"{"tags":{"o":"r","v":"y"},"title":{"o":"d","v":"=11\t+!"}}"#, sv: 1, ccid: "edit-a"
            )))
            #expect(rebased.sourceVersion == 2)
            #expect(rebased.endVersion == 3)
            #expect(withoutVersionFacts(try await alice.request("0:e:doc.3")) == "0:e:doc.3\n{\"data\":{\"tags\":\"y\",\"title\":\"hello there world!\"}}")
            // The broadcast diff applies to what other clients hold (v2).
            let onOther = try appliedChange(try await other.receiveMessage())
            #expect(onOther == rebased)
            let v2: JSONObject = ["title": "hello there world", "tags": "x"]
            #expect(try JSONDiffing.apply(try #require(onOther.diff), to: v2) == ["title": "hello there world!", "tags": "y"])
            await alice.close()
            await other.close()
        }
    }

    @Test(arguments: StoreKind.allCases) func usersAreIsolated(store: StoreKind) async throws {
        try await withServer(store: store) { server in
            let aliceToken = try await makeUser(server, "alice")
            let bobToken = try await makeUser(server, "bob")
            let alice = try await server.socket()
            let bob = try await server.socket()
            #expect(try await alice.authorize(token: aliceToken) == "alice")
            #expect(try await bob.authorize(token: bobToken) == "bob")
            let secret = try await create(alice, key: "secret", object: ["pin": 1234])

            #expect(try await bob.expectSilence() == nil)
            #expect(try await bob.request("0:e:secret.1") == "0:e:secret.1\n?")
            guard case .channel(0, .index(let page)) = try await bob.receiveMessage(after: "0:i:1:::100") else {
                Issue.record("expected index"); return
            }
            #expect(page.index.isEmpty)
            // Alice's cv means nothing in Bob's bucket.
            #expect(try await bob.request("0:cv:\(secret.changeVersion)") == "0:cv:?")
            // Same key in Bob's bucket is a separate entity.
            let bobs = try await create(bob, key: "secret", object: ["pin": 1])
            #expect(bobs.endVersion == 1)
            #expect(try await alice.expectSilence() == nil)
            await alice.close()
            await bob.close()
        }
    }

    @Test func restartKeepsDataAndChangeVersions() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let (token, lastBefore, firstCV) = try await withServer(directory: directory) { server in
            let token = try await makeUser(server)
            let socket = try await server.socket()
            _ = try await socket.authorize(token: token)
            let first = try await create(socket, key: "kept", object: ["v": 1])
            let second = try appliedChange(try await socket.receiveMessage(after: changeFrame(
                key: "kept", diff: #"{"v":{"o":"r","v":2}}"#, sv: 1, ccid: "before-restart"
            )))
            await socket.close()
            return (token, second, first.changeVersion)
        }
        try await withServer(directory: directory) { server in
            let socket = try await server.socket()
            _ = try await socket.authorize(token: token)
            #expect(withoutVersionFacts(try await socket.request("0:e:kept.2")) == "0:e:kept.2\n{\"data\":{\"v\":2}}")
            let caughtUp = try changes(try await socket.receiveMessage(after: "0:cv:\(firstCV)"))
            #expect(caughtUp == [.applied(lastBefore)])
            // The ccid is still known, and new cvs continue after the old ones.
            let duplicate = try rejection(try await socket.receiveMessage(after: changeFrame(
                key: "kept", diff: #"{"v":{"o":"r","v":2}}"#, sv: 1, ccid: "before-restart"
            )))
            #expect(duplicate.code == 409)
            let next = try await create(socket, key: "new", object: ["n": 1])
            #expect(next.changeVersion > lastBefore.changeVersion)
            await socket.close()
        }
    }

    /// A copy of the data directory served (a restore of a file backup) begins a history of its
    /// own: a cv handed out before is answered `cv:?`, though the copy holds the change it
    /// names, so its holder re-indexes instead of being caught up with changes it saw, and
    /// perhaps undid, in the history the restore left (issue 35). The original goes on as before.
    @Test func aCopyOfTheDataDirectoryBeginsAHistoryOfItsOwn() async throws {
        let original = try TemporaryDirectory()
        defer { original.remove() }
        let (token, first, second) = try await withServer(directory: original) { server in
            let token = try await makeUser(server)
            let socket = try await server.socket()
            _ = try await socket.authorize(token: token)
            let first = try await create(socket, key: "a", object: ["v": 1])
            let second = try await create(socket, key: "b", object: ["v": 1])
            await socket.close()
            return (token, first, second)
        }
        let copy = try TemporaryDirectory()
        defer { copy.remove() }
        for name in try FileManager.default.contentsOfDirectory(atPath: original.path) {
            try FileManager.default.copyItem(atPath: original.path + "/" + name, toPath: copy.path + "/" + name)
        }
        try await withServer(directory: copy) { server in
            #expect(try server.sqliteStore.history.start == .moved)
            let socket = try await server.socket()
            _ = try await socket.authorize(token: token)
            #expect(try await socket.request("0:cv:\(first.changeVersion)") == "0:cv:?")
            #expect(try await socket.request("0:cv:\(second.changeVersion)") == "0:cv:?")
            // Its own cvs catch up as ever, and count on from the copied counter.
            guard case .channel(0, .index(let page)) = try await socket.receiveMessage(after: "0:i::::10") else {
                Issue.record("expected an index page"); return
            }
            #expect(page.index.map(\.id) == ["a", "b"])
            #expect(page.current.prefix(12) == second.changeVersion.prefix(12) && page.current != second.changeVersion)
            #expect(try await socket.request("0:cv:\(page.current)") == "0:c:[]")
            await socket.close()
        }
        try await withServer(directory: original) { server in
            #expect(try server.sqliteStore.history.start == .continued)
            let socket = try await server.socket()
            _ = try await socket.authorize(token: token)
            #expect(try changes(try await socket.receiveMessage(after: "0:cv:\(first.changeVersion)")) == [.applied(second)])
            await socket.close()
        }
    }

    @Test func compactedChangeVersionsAnswerUnknown() async throws {
        try await withServer(configure: { $0.changeLogRetention = 4 }) { server in
            let token = try await makeUser(server)
            let socket = try await server.socket()
            _ = try await socket.authorize(token: token)
            var applied: [AppliedChange] = []
            for index in 0..<3 { applied.append(try await create(socket, key: "k\(index)", object: ["i": .integer(Int64(index))])) }
            #expect(try await server.store.compactChangeLog(username: "alice@example.com", bucket: "notes", keepingLast: 1) == 2)
            #expect(try await socket.request("0:cv:\(applied[0].changeVersion)") == "0:cv:?")
            // The newest compacted cv is the new base: clients there can still catch up.
            #expect(try changes(try await socket.receiveMessage(after: "0:cv:\(applied[1].changeVersion)")) == [.applied(applied[2])])
            #expect(try await socket.request("0:cv:\(applied[2].changeVersion)") == "0:c:[]")

            // Automatic compaction keeps the log near its retention.
            for index in 3..<12 { applied.append(try await create(socket, key: "k\(index)", object: ["i": .integer(Int64(index))])) }
            let kept = try await server.sqliteStore.pool.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM changes") ?? 0 }
            #expect(kept <= 5)
            #expect(try await socket.request("0:cv:\(applied[2].changeVersion)") == "0:cv:?")
            // The index still has every entity.
            guard case .channel(0, .index(let page)) = try await socket.receiveMessage(after: "0:i::::100") else {
                Issue.record("expected index"); return
            }
            #expect(page.index.count == 12)
            await socket.close()
        }
    }
}
