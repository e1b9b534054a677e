import JSONDiff
import SyncProtocol
@testable import SyncServer
import Testing

/// Issue 13, "The server answers a ccid once": a refusal is remembered like an application.
@Suite(.timeLimit(.minutes(2)))
struct CCIDOnceTests {
    @Test(arguments: StoreKind.allCases) func aRefusedDeleteSentAgainIsRefusedAgainAfterTheEntityIsReCreated(store: StoreKind) async throws {
        try await withServer(store: store) { server in
            let token = try await makeUser(server)
            let socket = try await server.socket()
            _ = try await socket.authorize(token: token)
            try await create(socket, key: "doc", object: ["n": 1])
            let delete = #"0:c:{"id":"doc","o":"-","sv":1,"ccid":"first-delete"}"#
            #expect(try appliedChange(try await socket.receiveMessage(after: delete)).endVersion == 2)
            // node-simperium's retry: a second delete, refused (the entity is gone) ...
            let retry = #"0:c:{"id":"doc","o":"-","sv":1,"ccid":"retried-delete"}"#
            #expect(try rejection(try await socket.receiveMessage(after: retry)).code == 404)
            // ... someone re-creates the entity ...
            let recreated = try await create(socket, key: "doc", object: ["n": 2])
            #expect(recreated.endVersion == 3)
            // ... and the same request sent again gets the same answer, not a deletion.
            #expect(try rejection(try await socket.receiveMessage(after: retry)).code == 404)
            #expect(withoutVersionFacts(try await socket.request("0:e:doc.3")) == #"0:e:doc.3\#n{"data":{"n":2}}"#)

            // A different request with that ccid (a client's recovery rewrites a refused change
            // and keeps its ccid) is a request of its own.
            let rewritten = #"0:c:{"id":"doc","o":"-","sv":3,"ccid":"retried-delete"}"#
            #expect(try appliedChange(try await socket.receiveMessage(after: rewritten)).endVersion == 4)
            await socket.close()
        }
    }

    @Test(arguments: StoreKind.allCases) func aRefusalIsRememberedPerClient(store: StoreKind) async throws {
        try await withServer(store: store) { server in
            let token = try await makeUser(server)
            let socket = try await server.socket()
            _ = try await socket.authorize(token: token, clientID: "one")
            let delete = #"0:c:{"id":"ghost","o":"-","sv":1,"ccid":"same-ccid"}"#
            #expect(try rejection(try await socket.receiveMessage(after: delete)).code == 404)
            try await create(socket, key: "ghost", object: ["n": 1])
            // Another client's ccid that happens to be equal is not the refused one.
            let other = try await server.socket()
            _ = try await other.authorize(token: token, clientID: "two")
            other.send(delete)
            #expect(try appliedChange(try await other.receiveMessage()).endVersion == 2)
            await other.close()
            await socket.close()
        }
    }
}
