import Foundation
import JSONDiff
import SyncProtocol
@testable import SyncServer
import Testing

/// The PostgreSQL store decides a batch of changes in memory and stores it with a few
/// multi-row statements: each change must get what the SQLite store, which stores them one at a
/// time, answers, however the changes fall into batches.
@Suite(.timeLimit(.minutes(2)))
struct PostgresBatchTests {
    /// Few versions of history, so a batch moves an entity's history floor past a stale sv.
    static let limits = ChangeLimits(maxDocumentSize: 1 << 20, historyPerEntity: 3, changeLogRetention: 10_000)

    @Test func changesThatDependOnEachOtherGetTheSQLiteStoresAnswersFromOneBatch() async throws {
        let changes = Self.dependentChanges()
        let sqlite = try await withServer(store: .sqlite) { server in try await Self.submitAtOnce(changes, to: server.store) }
        let postgres = try await withServer(store: .postgres) { server in try await Self.submitAtOnce(changes, to: server.store) }
        #expect(postgres.count == changes.count)
        for (index, (expected, got)) in zip(sqlite, postgres).enumerated() {
            #expect(got == expected, "change \(index) (\(changes[index].client) \(changes[index].request.ccid))")
        }
        // The sequence means something: it has acceptances and each refusal it was built for.
        #expect(sqlite.filter { $0.hasPrefix("accepted") }.count == 8)
        #expect(sqlite.filter { $0.hasPrefix("refused") }.sorted() == [
            "refused 404", "refused 404", "refused 404", "refused 405", "refused 405", "refused 409", "refused 412",
        ])
    }

    @Test func connectionsOpeningOneNewBucketAtOnceAllGetIt() async throws {
        try await withServer(store: .postgres) { server in
            let token = try await server.store.createUser(username: "opener@example.com", password: "secret").accessToken
            let user = try #require(try await server.store.user(forToken: token))
            for round in 0..<5 {
                let ids = try await withThrowingTaskGroup(of: Int64.self) { group in
                    for _ in 0..<16 {
                        group.addTask { try await server.store.openBucket(userID: user.id, name: "fresh\(round)").id }
                    }
                    return try await group.reduce(into: Set<Int64>()) { $0.insert($1) }
                }
                #expect(ids.count == 1, "bucket fresh\(round) opened as \(ids)")
            }
        }
    }

    /// Changes of two clients to one entity, each depending on the ones before it: a version
    /// made earlier in the batch, a ccid applied or refused earlier, a history floor moved.
    static func dependentChanges() -> [(client: String, request: ChangeRequest)] {
        let v1: JSONObject = ["a": 1]
        let v2: JSONObject = ["a": 2]
        let v4: JSONObject = ["a": 3, "b": 1]
        func modify(_ from: JSONObject, _ to: JSONObject, sv: Int?, ccid: String, key: String = "k") -> ChangeRequest {
            ChangeRequest(id: key, operation: .modify, diff: JSONDiffing.diff(from: from, to: to), sourceVersion: sv, ccid: ccid)
        }
        let second = modify(v1, v2, sv: 1, ccid: "c2")
        let staleAfterFloor = modify(v1, ["a": 1, "c": 1], sv: 1, ccid: "c5")
        return [
            ("one", modify([:], v1, sv: nil, ccid: "c1")), // v1
            ("one", second), // v2
            ("one", second), // 409: applied earlier in the batch
            ("two", modify(v1, ["a": 1, "b": 1], sv: 1, ccid: "c3")), // stale sv 1: rebased, v3
            ("two", modify(["a": 2, "b": 1], v4, sv: 3, ccid: "c4")), // v4; history keeps 2...4
            ("two", staleAfterFloor), // 405: v1 left the history in this batch
            ("two", staleAfterFloor), // 405 again: remembered
            ("one", ChangeRequest(id: "k", operation: .remove, sourceVersion: 4, ccid: "c6")), // v5, deleted
            ("one", ChangeRequest(id: "k", operation: .remove, sourceVersion: 5, ccid: "c7")), // 404
            ("one", ChangeRequest(id: "k", operation: .modify, ccid: "c8", data: ["x": 1])), // v6, made again
            ("one", modify(["x": 1], ["x": 1, "y": 1], sv: 2, ccid: "c9", key: "other")), // 404: no such entity
            ("one", modify(["x": 1], ["x": 1], sv: 6, ccid: "c10")), // 412: changes nothing
            ("two", ChangeRequest(id: "k", operation: .remove, sourceVersion: 6, ccid: "c7")), // v7: another client's c7
            ("one", ChangeRequest(id: "k", operation: .remove, sourceVersion: 5, ccid: "c7")), // 404 remembered for "one"
            ("one", modify([:], ["n": 1], sv: nil, ccid: "c11", key: "n")), // v1 of another entity
        ]
    }

    /// Submits every change without waiting (so they share batches) and describes each answer.
    /// `beforeSubmitting` and `afterSubmitting` run around the submissions (the group-commit
    /// tests hold the store's writer between them, so that every change makes one batch).
    static func submitAtOnce(
        _ changes: [(client: String, request: ChangeRequest)], to store: any ServerStorage, limits: ChangeLimits = limits,
        beforeSubmitting: () -> Void = {}, afterSubmitting: () -> Void = {}
    ) async throws -> [String] {
        let username = "batch@example.com"
        if try await store.user(named: username) == nil { _ = try await store.createUser(username: username, password: "secret") }
        let user = try #require(try await store.user(named: username))
        let bucket = try await store.openBucket(userID: user.id, name: "notes")
        let answers = AnswerBox(count: changes.count)
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            beforeSubmitting()
            for (index, change) in changes.enumerated() {
                store.submit(change.request, clientID: change.client, bucket: bucket, limits: limits) { result in
                    if answers.set(index, Self.describe(result)) { done.resume() }
                }
            }
            afterSubmitting()
        }
        return answers.all
    }

    static func describe(_ result: Result<ChangeVerdict<StoredChange>, any Error>) -> String {
        switch result {
        case .success(.accepted(let stored)):
            let diff = stored.diff.map { JSONDiffing.encode($0).compactRendered() } ?? "-"
            return "accepted cv \(stored.cv) \(stored.operation) \(stored.sourceVersion.map(String.init) ?? "-")->\(stored.endVersion) \(diff)"
        case .success(.refused(let code)):
            return "refused \(code.rawValue)"
        case .failure(let error):
            return "failed \(error)"
        }
    }
}

/// Answers arriving on the store's completion sequence.
private final class AnswerBox: @unchecked Sendable {
    private let lock = NSLock()
    private var answers: [String?]

    init(count: Int) { answers = Array(repeating: nil, count: count) }

    /// Records an answer; true once every answer is in.
    func set(_ index: Int, _ answer: String) -> Bool {
        lock.withLock {
            answers[index] = answer
            return answers.allSatisfy { $0 != nil }
        }
    }

    var all: [String] { lock.withLock { answers.map { $0 ?? "none" } } }
}
