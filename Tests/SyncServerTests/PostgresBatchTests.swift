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
}
