import Foundation
import JSONDiff
import Testing
@testable import SyncClient
@testable import SyncStore

/// The server's acknowledgement of our own change, applied from what was sent, against the real
/// server: each client ends with the server's value as its ghost and its own value, whether the
/// file was edited again while the change was in flight, another client changed the entity at
/// the same time, the change was sent again after a reconnect, or the bucket is a text view.
@Suite("acknowledgement of our own change, against the real server", .serialized, .timeLimit(.minutes(2)))
struct AcknowledgementPathTests {
    /// Every client's ghost, value and file agree with the others' and nothing is owed.
    func expectConverged(_ clients: [TestClient], key: String, to expected: JSONObject? = nil) throws {
        let entities = try clients.map { try #require(try $0.store.entity(bucket: "notes", key: key)) }
        for (client, entity) in zip(clients, entities) {
            #expect(entity.state == .synced, "\(client.name): \(entity.state) \(entity.reason ?? "")")
            #expect(entity.value == entity.ghost, "\(client.name)")
            #expect(entity.version == entities[0].version, "\(client.name)")
            #expect(entity.ghost == entities[0].ghost, "\(client.name)")
            #expect(try client.store.outgoingChanges(bucket: "notes").isEmpty, "\(client.name)")
        }
        if let expected { #expect(entities[0].ghost == expected) }
    }

    @Test func savedAndAcknowledgedWithNoLocalEdit() async throws {
        try await SyncFixture.run { fixture in
            let (a, b) = try await fixture.startedPair()
            for round in 1...5 {
                let value: JSONObject = ["title": .string("round \(round)"), "body": .string(String(repeating: "x", count: round * 40))]
                _ = try await a.client.save(bucket: "notes", key: "k", value: value)
                #expect(await a.client.waitUntilAcknowledged(bucket: "notes", key: "k", timeout: .seconds(60)) == .synced)
                #expect(try a.store.entity(bucket: "notes", key: "k")?.version == round)
                #expect(try a.store.entity(bucket: "notes", key: "k")?.ghost == value)
            }
            #expect(a.store.sentChanges.count == 0)
            try await a.idle()
            #expect(try await eventually { try b.store.entity(bucket: "notes", key: "k")?.version == 5 })
            try await b.idle()
            try expectConverged([a, b], key: "k")
        }
    }

    @Test func editsMadeWhileInFlightAreSentAfterTheAcknowledgement() async throws {
        try await SyncFixture.run { fixture in
            let (a, b) = try await fixture.startedPair()
            // Each save is made at once after the last: most land while the one before is in flight.
            var last: JSONObject = [:]
            for step in 1...20 {
                last = ["text": .string((1...step).map { "line \($0)" }.joined(separator: "\n")), "step": .integer(Int64(step))]
                _ = try await a.client.save(bucket: "notes", key: "doc", value: last)
            }
            try await a.idle()
            let expected = last
            #expect(try await eventually { try b.value("doc") == expected })
            try await b.idle()
            try expectConverged([a, b], key: "doc", to: last)
        }
    }

    @Test func concurrentEditsOfOneEntityOnTwoClientsMerge() async throws {
        try await SyncFixture.run { fixture in
            let (a, b) = try await fixture.startedPair()
            _ = try await a.client.save(bucket: "notes", key: "doc", value: ["a": "", "b": ""])
            try await a.idle()
            #expect(try await eventually { try b.value("doc") != nil })
            try await b.idle()
            // Both write their own field at the same time, again and again: acknowledgements of
            // each one's changes arrive between the other's, rebased by the server.
            for round in 1...10 {
                async let fromA = a.client.modify(bucket: "notes", key: "doc") { value in
                    var value = value ?? [:]
                    value["a"] = .string(String(repeating: "a", count: round))
                    return value
                }
                async let fromB = b.client.modify(bucket: "notes", key: "doc") { value in
                    var value = value ?? [:]
                    value["b"] = .string(String(repeating: "b", count: round))
                    return value
                }
                _ = try await (fromA, fromB)
            }
            try await a.idle()
            try await b.idle()
            #expect(try await eventually { try a.value("doc") == b.value("doc") })
            try await a.idle()
            try await b.idle()
            try expectConverged([a, b], key: "doc", to: ["a": "aaaaaaaaaa", "b": "bbbbbbbbbb"])
        }
    }

    @Test func changeSentAgainAfterAReconnectIsAcknowledged() async throws {
        try await SyncFixture.run { fixture in
            let server = fixture.server
            let (a, b) = try await fixture.startedPair()
            _ = try await a.client.save(bucket: "notes", key: "doc", value: ["v": 1])
            try await a.idle()
            // Sent, and the server goes away before (or just after) taking it.
            _ = try await a.client.save(bucket: "notes", key: "doc", value: ["v": 2, "note": "sent before the server went down"])
            await server.stop()
            #expect(try await eventually {
                if case .offline = a.client.connectionState { return true } else { return false }
            })
            try await server.start()
            await a.client.reconnectNow()
            await b.client.reconnectNow()
            try await a.idle()
            #expect(try await eventually { try b.value("doc")?["v"] == .integer(2) })
            try await b.idle()
            try expectConverged([a, b], key: "doc", to: ["v": 2, "note": "sent before the server went down"])
            #expect(try a.store.entity(bucket: "notes", key: "doc")?.version == 2)
        }
    }

    @Test func textViewSavesConvergeWithAJSONView() async throws {
        try await SyncFixture.run { fixture in
            let a = try await fixture.client("a")
            try a.store.setFileFormat(TextFieldFormat(field: "content"), forBucket: "notes")
            let b = try await fixture.client("b")
            await a.client.start()
            await b.client.start()
            try await a.idle()
            try await b.idle()
            var text = ""
            for line in 1...15 {
                text += "line \(line)\n"
                _ = try await a.client.save(bucket: "notes", key: "note", bytes: Array(text.utf8))
            }
            try await a.idle()
            let expected = text
            #expect(try await eventually { try b.value("note")?["content"] == .string(expected) })
            // The JSON view adds a field; the text view keeps it and its own text.
            _ = try await b.client.modify(bucket: "notes", key: "note") { value in
                var value = value ?? [:]
                value["tags"] = .array([.string("t")])
                return value
            }
            try await b.idle()
            #expect(try await eventually { try a.value("note")?["tags"] == .array([.string("t")]) })
            _ = try await a.client.save(bucket: "notes", key: "note", bytes: Array((text + "last\n").utf8))
            try await a.idle()
            #expect(try await eventually { try b.value("note")?["content"] == .string(expected + "last\n") })
            try await b.idle()
            try expectConverged([a, b], key: "note", to: ["content": .string(expected + "last\n"), "tags": .array([.string("t")])])
            #expect(try a.client.read(bucket: "notes", key: "note") == Array((expected + "last\n").utf8))
        }
    }
}
