import Foundation
import JSONDiff
import SyncProtocol
@testable import SyncServer
import Testing

@Suite(.timeLimit(.minutes(2)))
struct StreamingCommandTests {
    @Test(arguments: StoreKind.allCases) func initAuthorizesAndReportsTokenErrors(store: StoreKind) async throws {
        try await withServer(store: store) { server in
            let token = try await makeUser(server)
            let socket = try await server.socket()
            #expect(try await socket.authorize(token: token) == "alice@example.com")

            socket.send(#"1:init:{"token":"short","name":"notes","clientid":"x"}"#)
            #expect(try await socket.receiveMessage() == .channel(1, .authError(code: 400, message: "Token format invalid")))

            socket.send(#"2:init:{"token":"\#(String(repeating: "a", count: 32))","name":"notes","clientid":"x"}"#)
            guard case .channel(2, .authError(401, _)) = try await socket.receiveMessage() else {
                Issue.record("expected 401"); return
            }
            socket.send(#"3:init:{"token":"\#(token)","name":"bad/name","clientid":"x"}"#)
            guard case .channel(3, .authError(500, _)) = try await socket.receiveMessage() else {
                Issue.record("expected 500 for a bad bucket name"); return
            }
            // The failed channels stay unusable; the good one still works.
            #expect(try await socket.request("h:7") == "h:8")
            await socket.close()
        }
    }

    @Test(arguments: StoreKind.allCases) func initRunsItsCmdAfterAuth(store: StoreKind) async throws {
        try await withServer(store: store) { server in
            let token = try await makeUser(server)
            let socket = try await server.socket()
            _ = try await socket.authorize(token: token, cmd: "i::::10")
            guard case .channel(0, .index(let page)) = try await socket.receiveMessage() else {
                Issue.record("expected an index page"); return
            }
            #expect(page.index.isEmpty)
            #expect(page.mark == nil)
            #expect(ChangeSequence.parse(page.current, history: 0) != nil)
            // An empty bucket's current cv is one the server can catch up from.
            #expect(try await socket.request("0:cv:\(page.current)") == "0:c:[]")
            await socket.close()
        }
    }

    @Test(arguments: StoreKind.allCases) func heartbeatIncrements(store: StoreKind) async throws {
        try await withServer(store: store) { server in
            let socket = try await server.socket()
            #expect(try await socket.request("h:0") == "h:1")
            #expect(try await socket.request("h:41") == "h:42")
            await socket.close()
        }
    }

    @Test(arguments: StoreKind.allCases) func createModifyEntityAndIndex(store: StoreKind) async throws {
        try await withServer(store: store) { server in
            let token = try await makeUser(server)
            let socket = try await server.socket()
            _ = try await socket.authorize(token: token)

            let ccid = newCCID()
            let created = try appliedChange(try ServerMessage.parse(try await socket.request(
                changeFrame(key: "note.1", diff: #"{"title":{"o":"+","v":"hello"}}"#, ccid: ccid)
            )))
            #expect(created.id == "note.1")
            #expect(created.endVersion == 1)
            #expect(created.sourceVersion == nil)
            #expect(created.ccids == [ccid])
            #expect(created.clientID == "test-client")
            #expect(ChangeSequence.parse(created.changeVersion, history: 0) != nil)

            let modified = try appliedChange(try ServerMessage.parse(try await socket.request(
                changeFrame(key: "note.1", diff: #"{"title":{"o":"r","v":"world"}}"#, sv: 1, ccid: newCCID())
            )))
            #expect(modified.sourceVersion == 1)
            #expect(modified.endVersion == 2)
            #expect(modified.changeVersion > created.changeVersion)

            #expect(withoutVersionFacts(try await socket.request("0:e:note.1.1")) == "0:e:note.1.1\n{\"data\":{\"title\":\"hello\"}}")
            #expect(withoutVersionFacts(try await socket.request("0:e:note.1.2")) == "0:e:note.1.2\n{\"data\":{\"title\":\"world\"}}")
            #expect(try await socket.request("0:e:note.1.3") == "0:e:note.1.3\n?")
            #expect(try await socket.request("0:e:missing.1") == "0:e:missing.1\n?")

            guard case .channel(0, .index(let page)) = try await socket.receiveMessage(after: "0:i:1:::10") else {
                Issue.record("expected an index page"); return
            }
            #expect(page.index == [IndexPage.Entry(id: "note.1", version: 2, data: ["title": "world"])])
            #expect(page.current == modified.changeVersion)
            await socket.close()
        }
    }

    @Test(arguments: StoreKind.allCases) func indexPagesWithMarksAndCappedLimit(store: StoreKind) async throws {
        try await withServer(store: store, configure: { $0.maxIndexPageSize = 3 }) { server in
            let token = try await makeUser(server)
            let socket = try await server.socket()
            _ = try await socket.authorize(token: token)
            let keys = (0..<7).map { "k\($0)" }
            for key in keys { try await create(socket, key: key, object: ["n": .string(key)]) }

            var seen: [String] = []
            var mark: String?
            var pages = 0
            repeat {
                // A huge limit is capped to the configured page size.
                guard case .channel(0, .index(let page)) = try await socket.receiveMessage(after: "0:i::\(mark ?? "")::1000000") else {
                    Issue.record("expected an index page"); return
                }
                #expect(page.index.count <= 3)
                #expect(page.index.allSatisfy { $0.data == nil && $0.version == 1 })
                seen += page.index.map(\.id)
                mark = page.mark
                pages += 1
            } while mark != nil && pages < 10
            #expect(seen == keys)
            #expect(pages == 3)

            // Marks are opaque: one the server did not make closes the connection with a reason.
            socket.send("0:i::zz-not-a-mark::10")
            let close = try await socket.waitForClose()
            #expect(close?.reason?.contains("mark") == true)
        }
    }

    @Test(arguments: StoreKind.allCases) func indexPagesWithDataStayWithinTheOutboundBudget(store: StoreKind) async throws {
        // Budget: a quarter of the outbound buffer, i.e. 8 KB of entity data per page.
        try await withServer(store: store, configure: { $0.maxOutboundBufferBytes = 32 * 1024 }) { server in
            let token = try await makeUser(server)
            let socket = try await server.socket()
            _ = try await socket.authorize(token: token)
            let blob = String(repeating: "z", count: 3000)
            for index in 0..<6 { try await create(socket, key: "big\(index)", object: ["blob": .string(blob)]) }
            var seen: [String] = []
            var mark: String?
            var pages = 0
            repeat {
                guard case .channel(0, .index(let page)) = try await socket.receiveMessage(after: "0:i:1:\(mark ?? "")::") else {
                    Issue.record("expected an index page"); return
                }
                #expect(page.index.count <= 2)
                #expect(page.index.allSatisfy { $0.data?["blob"] == .string(blob) })
                seen += page.index.map(\.id)
                mark = page.mark
                pages += 1
            } while mark != nil && pages < 10
            #expect(seen == (0..<6).map { "big\($0)" })
            #expect(pages == 3)
            await socket.close()
        }
    }

    @Test(arguments: StoreKind.allCases) func changeVersionCatchUp(store: StoreKind) async throws {
        try await withServer(store: store) { server in
            let token = try await makeUser(server)
            let socket = try await server.socket()
            _ = try await socket.authorize(token: token)
            let first = try await create(socket, key: "a", object: ["x": 1])
            let second = try await create(socket, key: "b", object: ["y": 2])
            let third = try await create(socket, key: "c", object: ["z": 3])

            let caughtUp = try changes(try await socket.receiveMessage(after: "0:cv:\(first.changeVersion)"))
            #expect(caughtUp == [.applied(second), .applied(third)])
            #expect(try await socket.request("0:cv:\(third.changeVersion)") == "0:c:[]")
            #expect(try await socket.request("0:cv:ffffffffffffffffffffffff") == "0:cv:?")
            #expect(try await socket.request("0:cv:not-a-cv") == "0:cv:?")
            await socket.close()
        }
    }
}

extension TestSocket {
    /// Sends `text` and parses the next message.
    func receiveMessage(after text: String) async throws -> ServerMessage {
        send(text)
        return try await receiveMessage()
    }
}
