import Foundation
import JSONDiff
import SyncProtocol
@testable import SyncServer
import Testing

/// Changes pipelined by several connections are committed in groups: every one is answered, in
/// the order each connection sent them, broadcasts follow cv order, and nothing is lost.
@Suite(.timeLimit(.minutes(2)))
struct GroupCommitTests {
    @Test func pipelinedChangesFromManyConnectionsAreAllAnsweredInOrder() async throws {
        try await withServer { server in
            let token = try await makeUser(server)
            let writers = 4
            let perWriter = 150
            var sockets: [TestSocket] = []
            for index in 0..<writers {
                let socket = try await server.socket()
                _ = try await socket.authorize(token: token, clientID: "w\(index)")
                await socket.splitMergedChanges()
                sockets.append(socket)
            }
            // Every connection sends all its changes without waiting, one bad change among them.
            for (index, socket) in sockets.enumerated() {
                for number in 0..<perWriter {
                    if number == 70 {
                        socket.send(#"0:c:{"id":"bad key!","o":"M","v":{},"ccid":"bad-\#(index)"}"#)
                    }
                    socket.send(changeFrame(key: "w\(index)-\(number)", diff: #"{"n":{"o":"+","v":\#(number)}}"#, ccid: "w\(index)-c\(number)"))
                }
            }
            var seenCVs: [[String]] = []
            for (index, socket) in sockets.enumerated() {
                var ownKeys: [String] = []
                var cvs: [String] = []
                var rejections: [ChangeRejection] = []
                // Each connection hears every change of every writer, plus its own rejection.
                for _ in 0..<(writers * perWriter + 1) {
                    for change in try changes(try await socket.receiveMessage()) {
                        switch change {
                        case .applied(let applied):
                            cvs.append(applied.changeVersion)
                            if applied.clientID == "w\(index)" { ownKeys.append(applied.id) }
                        case .rejected(let rejection):
                            #expect(ownKeys.count == 70, "the rejection comes after the 70 changes sent before it")
                            rejections.append(rejection)
                        }
                    }
                }
                #expect(ownKeys == (0..<perWriter).map { "w\(index)-\($0)" })
                #expect(rejections.map(\.ccids) == [["bad-\(index)"]])
                #expect(Set(cvs).count == cvs.count)
                #expect(cvs == cvs.sorted(), "broadcasts arrive in cv order")
                seenCVs.append(cvs)
            }
            // All connections saw the same sequence of changes.
            #expect(Set(seenCVs.map { $0.joined(separator: ",") }).count == 1)
            // A later command sees every change (it waits for the connection's pending ones).
            let last = withoutAcceptedTime(try await sockets[0].request("0:e:w3-\(perWriter - 1).1"))
            #expect(last.hasPrefix("0:e:w3-\(perWriter - 1).1\n{\"data\":{\"n\":\(perWriter - 1)}}"))
            for socket in sockets { await socket.close() }
        }
    }

    @Test func pipelinedChangesSurviveARestart() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let count = 300
        let token = try await withServer(directory: directory) { server in
            let token = try await makeUser(server)
            let socket = try await server.socket()
            _ = try await socket.authorize(token: token)
            await socket.splitMergedChanges()
            for number in 0..<count {
                socket.send(changeFrame(key: "k\(number)", diff: #"{"n":{"o":"+","v":\#(number)}}"#, ccid: "c\(number)"))
            }
            // Each acknowledgement means the change is durable.
            for number in 0..<count {
                #expect(try appliedChange(try await socket.receiveMessage()).id == "k\(number)")
            }
            await socket.close()
            return token
        }
        try await withServer(directory: directory) { server in
            let socket = try await server.socket()
            _ = try await socket.authorize(token: token)
            var keys: Set<String> = []
            var mark: String?
            repeat {
                let request = "0:i::\(mark ?? "")::1000"
                guard case .channel(0, .index(let page)) = try ServerMessage.parse(try await socket.request(request)) else {
                    throw TestFailure("expected an index page")
                }
                keys.formUnion(page.index.map(\.id))
                mark = page.mark
            } while mark != nil
            #expect(keys == Set((0..<count).map { "k\($0)" }))
            await socket.close()
        }
    }

    @Test func indexPagesStayInLineWithBroadcasts() async throws {
        try await withServer { server in
            let token = try await makeUser(server)
            let writer = try await server.socket()
            _ = try await writer.authorize(token: token, clientID: "writer")
            let reader = try await server.socket()
            _ = try await reader.authorize(token: token, clientID: "reader")
            await reader.splitMergedChanges()
            let count = 1000
            for number in 0..<count {
                writer.send(changeFrame(key: "k\(number)", diff: #"{"n":{"o":"+","v":\#(number)}}"#, ccid: "c\(number)"))
            }
            // While the changes are being committed the reader asks for the index now and then:
            // every entity a page lists was broadcast to it before the page.
            var broadcast: [String] = []
            var lastCV = ""
            var pages = 0
            var requested = 0
            var nextRequest = 10
            while broadcast.count < count || pages < requested {
                if broadcast.count >= nextRequest {
                    reader.send("0:i::::1000")
                    requested += 1
                    nextRequest += 25
                }
                switch try await reader.receiveMessage() {
                case .channel(0, .changes(let list)):
                    for case .applied(let change) in list {
                        broadcast.append(change.id)
                        lastCV = change.changeVersion
                    }
                case .channel(0, .index(let page)):
                    pages += 1
                    let ahead = Set(page.index.map(\.id)).subtracting(broadcast)
                    #expect(ahead.isEmpty, "an index page got ahead of the broadcasts of \(ahead.count) entities")
                    #expect(page.current <= lastCV, "page made at \(page.current), broadcasts seen up to \(lastCV)")
                case let other:
                    throw TestFailure("unexpected \(other)")
                }
            }
            #expect(broadcast == (0..<count).map { "k\($0)" })
            #expect(pages > 0)
            await writer.close()
            await reader.close()
        }
    }
}
