import Foundation
import JSONDiff
import SyncStore
import Testing
@testable import SyncClient

/// Every change error code, forced by the server's fault-injection hook on a real connection.
@Suite("change error paths against the real server", .serialized, .timeLimit(.minutes(2)))
struct ChangeErrorPathTests {
    /// a and b are in sync on `doc` = {"n": 0}; the next change to `doc` (the next `times`) is
    /// refused with `code`; then a saves {"n": 1}.
    func scenario(
        code: Int, times: Int = 1, check: (TestClient, TestClient, TestServer) async throws -> Void
    ) async throws {
        try await SyncFixture.run { fixture in
            let server = fixture.server
            let (a, b) = try await fixture.startedPair(waitUntilIdle: false)
            _ = try await a.client.save(bucket: "notes", key: "doc", value: ["n": 0])
            #expect(try await eventually { try b.value("doc") == ["n": 0] })
            try await a.idle()
            server.faults.fail(key: "doc", with: code, times: times)
            _ = try await a.client.save(bucket: "notes", key: "doc", value: ["n": 1])
            if times == 1 { #expect(try await eventually { server.faults.isExhausted }) }
            try await check(a, b, server)
        }
    }

    /// The change goes through after the error is handled; both clients end equal and synced.
    func recovers(code: Int) async throws {
        try await scenario(code: code) { a, b, _ in
            #expect(try await eventually { try b.value("doc") == ["n": 1] })
            try await a.idle()
            let entity = try #require(try a.store.entity(bucket: "notes", key: "doc"))
            #expect(entity.state == .synced)
            #expect(entity.value == ["n": 1])
            #expect(entity.ghost == ["n": 1])
        }
    }

    @Test func unauthorizedReauthorizesAndResends() async throws { try await recovers(code: 401) }
    @Test func notFoundResendsFullObject() async throws { try await recovers(code: 404) }
    @Test func badVersionCatchesUpAndResends() async throws { try await recovers(code: 405) }

    /// 405 again after the rebase: the change goes with the whole object, and is taken.
    @Test func badVersionAgainSendsTheWholeObject() async throws {
        try await scenario(code: 405, times: 2) { a, b, server in
            #expect(try await eventually { server.faults.isExhausted })
            #expect(try await eventually { try b.value("doc") == ["n": 1] })
            try await a.idle()
            let entity = try #require(try a.store.entity(bucket: "notes", key: "doc"))
            #expect(entity.state == .synced)
            #expect(entity.ghost == ["n": 1])
        }
    }
    @Test func duplicateCatchesUpAndTheEditIsNotLost() async throws { try await recovers(code: 409) }
    @Test func emptyChangeIsDroppedButTheEditIsNotLost() async throws { try await recovers(code: 412) }
    @Test func invalidDiffResendsWithWholeObject() async throws { try await recovers(code: 440) }
    @Test func serverErrorRetries() async throws { try await recovers(code: 500) }

    /// Refusals that stop a change and keep the local value: 400 and 413 at once; 401 when it
    /// comes again after authorizing anew (a token that may read but not write); 440 when it
    /// comes again for the change sent with the whole object. Nothing goes in a loop, and a later
    /// save is tried again.
    @Test(arguments: [(400, 1), (413, 1), (401, 2), (440, 2)])
    func refusedChangeIsKeptLocallyAndMarked(code: Int, refusals: Int) async throws {
        try await scenario(code: code, times: refusals) { a, b, server in
            #expect(try await eventually { try a.store.entity(bucket: "notes", key: "doc")?.state == .rejected(code: code) })
            #expect(server.faults.isExhausted)
            let entity = try #require(try a.store.entity(bucket: "notes", key: "doc"))
            #expect(entity.value == ["n": 1])
            #expect(entity.reason?.contains(String(code)) == true)
            #expect(try a.store.outgoingChanges(bucket: "notes").isEmpty)
            // Not sent again: one more try would have gone through.
            try await Task.sleep(for: .milliseconds(200))
            #expect(try b.value("doc") == ["n": 0])
            _ = try await a.client.save(bucket: "notes", key: "doc", value: ["n": 2])
            #expect(try await eventually { try b.value("doc") == ["n": 2] })
        }
    }

    /// A server failing for a while (500: its disk is full) is sent the change again after a
    /// growing delay (50 ms doubling to 400 ms here, times 0.5-1.0), not at once in a loop.
    @Test func aServerThatKeepsFailingGetsTheChangeAgainLessAndLessOften() async throws {
        try await scenario(code: 500, times: 5) { a, b, server in
            let start = ContinuousClock.now
            #expect(try await eventually { server.faults.isExhausted })
            // The waits after the refusals: at least 25 + 50 + 100 + 200 ms, less the little
            // that passed before this check began.
            #expect(ContinuousClock.now - start >= .milliseconds(300))
            #expect(try await eventually { try b.value("doc") == ["n": 1] })
            try await a.idle()
            #expect(try a.store.entity(bucket: "notes", key: "doc")?.state == .synced)
        }
    }

    @Test func repeatedBadVersionFallsBackToWholeObject() async throws {
        try await SyncFixture.run { fixture in
            let server = fixture.server
            let (a, b) = try await fixture.startedPair(waitUntilIdle: false)
            _ = try await a.client.save(bucket: "notes", key: "doc", value: ["n": 0])
            #expect(try await eventually { try b.value("doc") == ["n": 0] })
            try await a.idle()
            server.faults.fail(key: "doc", with: 405, times: 2)
            _ = try await a.client.save(bucket: "notes", key: "doc", value: ["n": 5])
            #expect(try await eventually { try b.value("doc") == ["n": 5] })
            try await a.idle()
        }
    }
}
