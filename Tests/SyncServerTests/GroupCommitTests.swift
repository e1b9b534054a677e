import Foundation
import GRDB
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
            let last = withoutVersionFacts(try await sockets[0].request("0:e:w3-\(perWriter - 1).1"))
            #expect(last.hasPrefix("0:e:w3-\(perWriter - 1).1\n{\"data\":{\"n\":\(perWriter - 1)}}"))
            for socket in sockets { await socket.close() }
        }
    }

    /// A group commit has no savepoint per change: every refusal must come before the change
    /// writes anything. One batch with every kind of refusal the store makes, among acceptances:
    /// the accepted changes get the change versions 1, 2, 3... with no gap a refusal left.
    @Test func refusalsInABatchWriteNothing() async throws {
        try await Self.withStore { store in
            var limits = PostgresBatchTests.limits
            limits.maxDocumentSize = 2048
            var deep: JSONValue = .array([])  // nested arrays: too deep to send, yet small
            for _ in 0..<(JSONValue.maxNestingDepth - 3) { deep = .array([deep]) }
            var changes = PostgresBatchTests.dependentChanges()
            changes.insert(("one", ChangeRequest(id: "big", operation: .modify, ccid: "big", data: ["t": .string(String(repeating: "x", count: 3000))])), at: 1)
            changes.insert(("two", ChangeRequest(id: "deep", operation: .modify, ccid: "deep", data: ["d": deep])), at: 5)
            let answers = try await Self.submitInOneBatch(changes, to: store, limits: limits)
            #expect(answers[1] == "refused 413")
            #expect(answers[5] == "refused 400")
            let refused = answers.filter { $0.hasPrefix("refused") }
            #expect(refused.count == 9)
            let versions = answers.compactMap { answer in answer.hasPrefix("accepted cv ") ? answer.split(separator: " ")[2] : nil }
            #expect(versions == (1...8).map { Substring(String($0)) }, "\(answers)")
            let lastVersion = try await store.pool.read { db in try Int64.fetchOne(db, sql: "SELECT last_cv FROM server_state") }
            #expect(lastVersion == 8)
            let refusedStored = try await store.pool.read { db in
                try Int.fetchOne(db, sql: "SELECT count(*) FROM entities WHERE key IN ('big', 'deep')")
            }
            #expect(refusedStored == 0)
        }
    }

    /// A change that fails with an error (here a trigger's, after the change wrote its entity
    /// and took a change version) in the middle of a batch fails alone: what it wrote is undone,
    /// the changes before and after it in the batch are stored, refusals still answered.
    @Test func aChangeFailingInABatchLosesOnlyItself() async throws {
        try await Self.withStore { store in
            try await store.pool.write { db in
                try db.execute(sql: """
                    CREATE TRIGGER fail_boom BEFORE INSERT ON changes WHEN NEW.key = 'boom'
                    BEGIN SELECT RAISE(ABORT, 'boom refused by the test'); END
                    """)
            }
            func create(_ key: String, ccid: String) -> (client: String, request: ChangeRequest) {
                ("one", ChangeRequest(id: key, operation: .modify, ccid: ccid, data: ["k": .string(key)]))
            }
            let changes = [
                create("a", ccid: "c1"), create("boom", ccid: "c2"), create("b", ccid: "c3"),
                create("a", ccid: "c1"), create("c", ccid: "c4"), create("boom", ccid: "c5"),
            ]
            let answers = try await Self.submitInOneBatch(changes, to: store, limits: PostgresBatchTests.limits)
            #expect(answers[0].hasPrefix("accepted cv 1 "))
            #expect(answers[1].hasPrefix("failed "), "\(answers[1])")
            #expect(answers[2].hasPrefix("accepted cv 2 "))
            #expect(answers[3] == "refused 409")
            #expect(answers[4].hasPrefix("accepted cv 3 "))
            #expect(answers[5].hasPrefix("failed "))
            let (keys, lastVersion) = try await store.pool.read { db in
                (try String.fetchAll(db, sql: "SELECT key FROM entities ORDER BY key"),
                 try Int64.fetchOne(db, sql: "SELECT last_cv FROM server_state"))
            }
            #expect(keys == ["a", "b", "c"])
            #expect(lastVersion == 3)
        }
    }

    /// The change version and each bucket's log length are counted in memory for a batch and
    /// written before it commits: a batch that compacts its bucket's log several times leaves
    /// both as the tables say, and the next batch counts on from them.
    @Test func aBatchThatCompactsLeavesTheCountersTrue() async throws {
        try await Self.withStore { store in
            var limits = PostgresBatchTests.limits
            limits.changeLogRetention = 8
            let changes = (0..<40).map { index in
                (client: "one", request: ChangeRequest(id: "k\(index)", operation: .modify, ccid: "c\(index)", data: ["i": .integer(Int64(index))]))
            }
            let answers = try await Self.submitInOneBatch(changes, to: store, limits: limits)
            #expect(answers.enumerated().allSatisfy { index, answer in answer.hasPrefix("accepted cv \(index + 1) ") }, "\(answers)")
            func counters() async throws -> (lastCV: Int64?, count: Int?, logged: Int?) {
                try await store.pool.read { db in
                    (try Int64.fetchOne(db, sql: "SELECT last_cv FROM server_state"),
                     try Int.fetchOne(db, sql: "SELECT change_count FROM buckets WHERE name = 'notes'"),
                     try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM changes"))
                }
            }
            let afterFirst = try await counters()
            #expect(afterFirst.lastCV == 40)
            #expect(afterFirst.count == afterFirst.logged)
            #expect((afterFirst.logged ?? 0) <= 9)
            // Another batch on the same bucket (submitAtOnce's user and bucket again).
            let more = (40..<45).map { index in
                (client: "one", request: ChangeRequest(id: "k\(index)", operation: .modify, ccid: "c\(index)", data: ["i": .integer(Int64(index))]))
            }
            let moreAnswers = try await Self.submitInOneBatch(more, to: store, limits: limits)
            #expect(moreAnswers.enumerated().allSatisfy { index, answer in answer.hasPrefix("accepted cv \(index + 41) ") }, "\(moreAnswers)")
            let afterSecond = try await counters()
            #expect(afterSecond.lastCV == 45)
            #expect(afterSecond.count == afterSecond.logged)
        }
    }

    /// A SQLite store of its own, removed afterwards.
    static func withStore(_ body: (ServerStore) async throws -> Void) async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        try await body(try ServerStore(directory: directory.path, passwordIterations: testPasswordIterations))
    }

    /// Submits `changes` while the store's writer is held, so that they all make one batch.
    static func submitInOneBatch(
        _ changes: [(client: String, request: ChangeRequest)], to store: ServerStore, limits: ChangeLimits
    ) async throws -> [String] {
        let writerHeld = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        return try await PostgresBatchTests.submitAtOnce(
            changes, to: store, limits: limits,
            beforeSubmitting: {
                store.pool.asyncWriteWithoutTransaction { _ in
                    writerHeld.signal()
                    release.wait()
                }
                writerHeld.wait()
            },
            afterSubmitting: { release.signal() })
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
