import Foundation
import JSONDiff
import SyncProtocol
@testable import SyncServer
import Testing

/// Issue 13 against the real server: object keys in two Unicode forms are two keys, and a lone
/// surrogate gets 400 (nothing stored as U+FFFD, the connection kept).
@Suite(.timeLimit(.minutes(2)))
struct UnicodeChangeTests {
    @Test(arguments: StoreKind.allCases) func aLoneSurrogateGets400AndNothingIsStored(store: StoreKind) async throws {
        try await withServer(store: store) { server in
            let token = try await makeUser(server)
            let socket = try await server.socket()
            _ = try await socket.authorize(token: token)
            let frame = #"0:c:{"id":"k","o":"M","v":{"t":{"o":"+","v":"a\ud800b"}},"ccid":"c1"}"#
            let reply = try rejection(try await socket.receiveMessage(after: frame))
            #expect(reply.code == 400)
            #expect(reply.ccids == ["c1"])
            #expect(await socket.isEnded == false)
            #expect(try await socket.request("0:e:k.1") == "0:e:k.1\n?")
            await socket.close()
        }
    }

    @Test(arguments: StoreKind.allCases) func aRenameBetweenEquivalentKeysIsApplied(store: StoreKind) async throws {
        try await withServer(store: store) { server in
            let token = try await makeUser(server)
            let socket = try await server.socket()
            _ = try await socket.authorize(token: token)
            let created = try appliedChange(try await socket.receiveMessage(
                after: #"0:c:{"id":"k","o":"M","v":{"caf\u00e9":{"o":"+","v":1}},"ccid":"c1"}"#))
            #expect(created.endVersion == 1)
            let renamed = try appliedChange(try await socket.receiveMessage(
                after: #"0:c:{"id":"k","o":"M","v":{"caf\u00e9":{"o":"-"},"cafe\u0301":{"o":"+","v":1}},"sv":1,"ccid":"c2"}"#))
            #expect(renamed.endVersion == 2)
            #expect(renamed.diff?.count == 2)
            let entity = withoutVersionFacts(try await socket.request("0:e:k.2"))
            #expect(entity == "0:e:k.2\n{\"data\":{\"cafe\u{301}\":1}}", "\(entity)")
            await socket.close()
        }
    }
}
