import Foundation
import JSONDiff
import SyncProtocol
@testable import SyncServer
import Testing

@Suite(.timeLimit(.minutes(2)))
struct ChangeErrorTests {
    /// Sends a change frame and returns the rejection's code (failing if the change was applied).
    private func errorCode(_ socket: TestSocket, _ frame: String) async throws -> Int {
        try rejection(try await socket.receiveMessage(after: frame)).code
    }

    private func authorized(_ server: RunningServer) async throws -> TestSocket {
        let token = try await makeUser(server)
        let socket = try await server.socket()
        _ = try await socket.authorize(token: token)
        return socket
    }

    @Test(arguments: StoreKind.allCases) func invalidChangesGet400AndKeepTheConnection(store: StoreKind) async throws {
        try await withServer(store: store) { server in
            let socket = try await authorized(server)
            let ccid = newCCID()
            let reply = try rejection(try await socket.receiveMessage(after: changeFrame(key: "bad key!", diff: "{}", ccid: ccid)))
            #expect(reply.code == 400)
            #expect(reply.ccids == [ccid])
            #expect(reply.id == "bad key!")
            #expect(reply.clientID == "test-client")
            #expect(try await errorCode(socket, #"0:c:{"id":"k","o":"M","v":{},"sv":"one","ccid":"c1"}"#) == 400)
            #expect(try await errorCode(socket, #"0:c:{"id":"k","o":"X","v":{},"ccid":"c2"}"#) == 400)
            #expect(try await errorCode(socket, #"0:c:{"id":"k","o":"M","v":[],"ccid":"c3"}"#) == 400)
            #expect(try await errorCode(socket, #"0:c:{"id":"k","o":"M","ccid":"c4"}"#) == 400)
            #expect(try await errorCode(socket, #"0:c:{"id":5,"o":"M","v":{},"ccid":"c5"}"#) == 400)
            // A batch: each change answered on its own (maybe merged into one message), the valid one applied.
            await socket.splitMergedChanges()
            socket.send(#"0:c:[{"id":"bad key","o":"M","v":{},"ccid":"c6"},{"id":"good","o":"M","v":{"a":{"o":"+","v":1}},"ccid":"c7"}]"#)
            #expect(try rejection(try await socket.receiveMessage()).code == 400)
            #expect(try appliedChange(try await socket.receiveMessage()).ccids == ["c7"])
            #expect(await socket.isEnded == false)
            await socket.close()
        }
    }

    @Test(arguments: StoreKind.allCases) func missingEntityGets404(store: StoreKind) async throws {
        try await withServer(store: store) { server in
            let socket = try await authorized(server)
            #expect(try await errorCode(socket, #"0:c:{"id":"ghost","o":"-","ccid":"r1"}"#) == 404)
            #expect(try await errorCode(socket, changeFrame(key: "ghost", diff: #"{"a":{"o":"+","v":1}}"#, sv: 3, ccid: newCCID())) == 404)
            // After a delete the entity is missing again.
            try await create(socket, key: "gone", object: ["a": 1])
            let removed = try appliedChange(try await socket.receiveMessage(after: #"0:c:{"id":"gone","o":"-","ccid":"r2"}"#))
            #expect(removed.operation == .remove)
            #expect(removed.endVersion == 2)
            #expect(try await errorCode(socket, #"0:c:{"id":"gone","o":"-","ccid":"r3"}"#) == 404)
            #expect(try await socket.request("0:e:gone.2") == "0:e:gone.2\n?")
            await socket.close()
        }
    }

    @Test(arguments: StoreKind.allCases) func badVersionsGet405(store: StoreKind) async throws {
        try await withServer(store: store, configure: { $0.historyPerEntity = 2 }) { server in
            let socket = try await authorized(server)
            try await create(socket, key: "doc", object: ["n": 0])
            // No sv on an existing entity, and an sv from the future.
            #expect(try await errorCode(socket, changeFrame(key: "doc", diff: #"{"n":{"o":"r","v":1}}"#, ccid: newCCID())) == 405)
            #expect(try await errorCode(socket, changeFrame(key: "doc", diff: #"{"n":{"o":"r","v":1}}"#, sv: 9, ccid: newCCID())) == 405)
            // An sv older than the kept history (2 versions) cannot be rebased.
            for version in 1...3 {
                _ = try appliedChange(try await socket.receiveMessage(after: changeFrame(
                    key: "doc", diff: #"{"n":{"o":"r","v":\#(version)}}"#, sv: version, ccid: newCCID()
                )))
            }
            #expect(try await errorCode(socket, changeFrame(key: "doc", diff: #"{"m":{"o":"+","v":1}}"#, sv: 1, ccid: newCCID())) == 405)
            #expect(try await socket.request("0:e:doc.1") == "0:e:doc.1\n?")
            await socket.close()
        }
    }

    @Test(arguments: StoreKind.allCases) func duplicateCCIDGets409(store: StoreKind) async throws {
        try await withServer(store: store) { server in
            let socket = try await authorized(server)
            let ccid = newCCID()
            let frame = changeFrame(key: "once", diff: #"{"a":{"o":"+","v":1}}"#, ccid: ccid)
            _ = try appliedChange(try await socket.receiveMessage(after: frame))
            let duplicate = try rejection(try await socket.receiveMessage(after: frame))
            #expect(duplicate.code == 409)
            #expect(duplicate.ccids == [ccid])
            await socket.close()
        }
    }

    @Test(arguments: StoreKind.allCases) func emptyChangeGets412(store: StoreKind) async throws {
        try await withServer(store: store) { server in
            let socket = try await authorized(server)
            try await create(socket, key: "same", object: ["a": 1])
            #expect(try await errorCode(socket, changeFrame(key: "same", diff: "{}", sv: 1, ccid: newCCID())) == 412)
            #expect(try await errorCode(socket, changeFrame(key: "same", diff: #"{"a":{"o":"r","v":1}}"#, sv: 1, ccid: newCCID())) == 412)
            await socket.close()
        }
    }

    @Test(arguments: StoreKind.allCases) func oversizedDocumentGets413(store: StoreKind) async throws {
        try await withServer(store: store, configure: { $0.maxDocumentSize = 1000 }) { server in
            let socket = try await authorized(server)
            let big = String(repeating: "x", count: 2000)
            #expect(try await errorCode(socket, changeFrame(key: "big", diff: #"{"t":{"o":"+","v":"\#(big)"}}"#, ccid: newCCID())) == 413)
            // Nothing was stored and the cv counter did not move.
            #expect(try await socket.request("0:e:big.1") == "0:e:big.1\n?")
            let small = try await create(socket, key: "small", object: ["t": "ok"])
            #expect(small.endVersion == 1)
            await socket.close()
        }
    }

    @Test(arguments: StoreKind.allCases) func diffThatDoesNotApplyGets440ThenFullObjectIsAccepted(store: StoreKind) async throws {
        try await withServer(store: store) { server in
            let socket = try await authorized(server)
            try await create(socket, key: "text", object: ["body": "hello"])
            let ccid = newCCID()
            // A string delta whose lengths do not fit "hello".
            let bad = changeFrame(key: "text", diff: #"{"body":{"o":"d","v":"=10\t+x"}}"#, sv: 1, ccid: ccid)
            #expect(try await errorCode(socket, bad) == 440)
            #expect(try await errorCode(socket, changeFrame(key: "text", diff: #"{"nope":{"o":"-"}}"#, sv: 1, ccid: newCCID())) == 440)
            // The resend keeps its ccid (dedup covers applied changes only) and carries `d`.
            let resend = changeFrame(key: "text", diff: #"{"body":{"o":"d","v":"=10\t+x"}}"#, sv: 1, ccid: ccid, data: #"{"body":"hello x"}"#)
            let applied = try appliedChange(try await socket.receiveMessage(after: resend))
            #expect(applied.ccids == [ccid])
            #expect(applied.sourceVersion == 1)
            #expect(applied.endVersion == 2)
            #expect(withoutVersionFacts(try await socket.request("0:e:text.2")) == "0:e:text.2\n{\"data\":{\"body\":\"hello x\"}}")
            // Its broadcast diff takes version 1 to version 2.
            let rebuilt = try JSONDiffing.apply(try #require(applied.diff), to: ["body": "hello"])
            #expect(rebuilt == ["body": "hello x"])
            await socket.close()
        }
    }

    @Test(arguments: StoreKind.allCases) func fullObjectWithoutSourceVersionReplaces(store: StoreKind) async throws {
        try await withServer(store: store) { server in
            let socket = try await authorized(server)
            try await create(socket, key: "doc", object: ["a": 1, "b": 2])
            let applied = try appliedChange(try await socket.receiveMessage(after:
                #"0:c:{"id":"doc","o":"M","v":{},"ccid":"full1","d":{"c":3}}"#))
            #expect(applied.sourceVersion == 1)
            #expect(applied.endVersion == 2)
            #expect(withoutVersionFacts(try await socket.request("0:e:doc.2")) == "0:e:doc.2\n{\"data\":{\"c\":3}}")
            await socket.close()
        }
    }

    @Test(arguments: StoreKind.allCases) func forcedErrorHookAnswersAnyCode(store: StoreKind) async throws {
        try await withServer(store: store, configure: { configuration in
            configuration.forcedChangeError = { change in change.id.hasPrefix("deny") ? 401 : nil }
        }) { server in
            let socket = try await authorized(server)
            let reply = try rejection(try await socket.receiveMessage(after: changeFrame(key: "deny-me", diff: #"{"a":{"o":"+","v":1}}"#, ccid: "f1")))
            #expect(reply.code == 401)
            #expect(reply.ccids == ["f1"])
            #expect(try await socket.request("0:e:deny-me.1") == "0:e:deny-me.1\n?")
            try await create(socket, key: "allowed", object: ["a": 1])
            await socket.close()
        }
    }
}
