import Foundation
import Synchronization
import JSONDiff
import SyncEngine
import SyncStore
import Testing
@testable import SyncClient

/// Changes bigger than the largest message the server takes (it closes the connection on one):
/// they must neither wedge the connection nor be lost.
@Suite("changes too large for one message", .serialized, .timeLimit(.minutes(2)))
struct OversizedChangeTests {
    static let frameLimit = 64 << 10
    /// ~100 KB of compact JSON: more than one message to the test server may carry.
    static let big: JSONObject = ["text": .string(String(repeating: "x", count: 100_000))]

    /// A real server taking messages up to `frameLimit` (documents up to 1 MiB), with clients a
    /// and b that know the limit.
    func run(_ body: (TestClient, TestClient) async throws -> Void) async throws {
        try await SyncFixture.run(server: { $0.maxFrameSize = Self.frameLimit }) { fixture in
            let a = try await fixture.client("a") { configuration in
                configuration.maxChangeFrameBytes = Self.frameLimit
                configuration.useDefaultHeartbeat()  // the tests count a's connections
            }
            let b = try await fixture.client("b") { $0.maxChangeFrameBytes = Self.frameLimit }
            await a.client.start()
            await b.client.start()
            try await a.idle()
            try await b.idle()
            try await body(a, b)
        }
    }

    @Test func aChangeTooLargeToSendIsKeptLocallyAndTheRestSyncs() async throws {
        try await run { a, b in
            _ = try await a.client.save(bucket: "notes", key: "big", value: Self.big)
            _ = try await a.client.save(bucket: "notes", key: "small", value: ["n": 1])
            #expect(try await eventually { try b.value("small") == ["n": 1] })
            let kept = try #require(try a.store.entity(bucket: "notes", key: "big"))
            #expect(kept.state == .rejected(code: 413))
            #expect(kept.value == Self.big)
            #expect(kept.reason?.contains("too large to send") == true, "\(kept.reason ?? "no reason")")
            #expect(try b.value("big") == nil)
            // Nothing made the server drop the connection.
            #expect(await a.client.connectionCounter == 1)
            // Made small enough, the next save sends it.
            _ = try await a.client.save(bucket: "notes", key: "big", value: ["text": "short now"])
            #expect(try await eventually { try b.value("big") == ["text": "short now"] })
            try await a.idle()
            #expect(try a.store.entity(bucket: "notes", key: "big")?.state == .synced)
        }
    }

    /// A change is kept back whether the store's text alone shows it too large (known before it
    /// is decoded and rendered) or only its rendered frame does (the envelope puts it over).
    @Test(arguments: [frameLimit - 40, 100_000]) func aChangeOverTheLimitByItsTextOrByItsFrameIsKeptBack(length: Int) async throws {
        try await run { a, b in
            let value: JSONObject = ["text": .string(String(repeating: "y", count: length))]
            _ = try await a.client.save(bucket: "notes", key: "edge", value: value)
            _ = try await a.client.save(bucket: "notes", key: "small", value: ["n": 2])
            #expect(try await eventually { try b.value("small") == ["n": 2] })
            #expect(try await eventually { try a.store.entity(bucket: "notes", key: "edge")?.state == .rejected(code: 413) })
            #expect(try b.value("edge") == nil)
            #expect(await a.client.connectionCounter == 1)
        }
    }

    /// What the store says a change takes at least is never more than its request renders to.
    @Test func theLeastRequestBytesAreALowerBound() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let store = try SyncStore(path: directory.file("lower.sqlite"))
        defer { try? store.close() }
        _ = try store.ensureBucket("notes")
        let values: [JSONObject] = [
            ["text": "caf\u{e9} \u{1F600} \"quoted\"\n"], ["n": 1, "list": [1, 2, "three"], "nested": ["a": ["b": .null]]], Self.big,
        ]
        for (index, value) in values.enumerated() {
            let change = try #require(try store.saveLocal(bucket: "notes", key: "k\(index)", value: value).readyToSend)
            let request = try Conversions.request(change, clientID: "a")
            #expect(change.leastRequestBytes > 0)
            #expect(change.leastRequestBytes <= request.renderedJSON().utf8.count, "\(value)")
            // Sent again whole (after 440): the diff and the whole object both go.
            try store.markSent([change])
            guard case .resend(let whole) = try store.reject(bucket: "notes", ccid: change.ccid, code: 440) else {
                Issue.record("expected the whole object"); continue
            }
            #expect(whole.fullData == value)
            #expect(whole.leastRequestBytes > change.leastRequestBytes)
            let wholeRequest = try Conversions.request(whole, clientID: "a")
            #expect(whole.leastRequestBytes <= wholeRequest.renderedJSON().utf8.count, "\(value)")
        }
    }

    /// A client told no limit (or a larger one than the server's) saves a change too large for
    /// the server, which closes the connection, at every reconnect; `body` watches the client's
    /// connection states from just before the save.
    func overrunTheServer(_ body: (AsyncStream<ConnectionState>) async throws -> Void) async throws {
        try await SyncFixture.run(server: { $0.maxFrameSize = Self.frameLimit }) { fixture in
            let a = try await fixture.client("a") { $0.maxChangeFrameBytes = .max }
            await a.client.start()
            try await a.idle()
            let states = a.client.connectionStates()
            _ = try await a.client.save(bucket: "notes", key: "big", value: Self.big)
            try await body(states)
            await a.client.stop()
        }
    }

    @Test func whenTheServerClosesTheConnectionTheClientSaysWhy() async throws {
        try await overrunTheServer { states in
            let reason = try await withTimeout(.seconds(60)) { () async -> String? in
                for await state in states {
                    if case .offline(_, _, let reason) = state { return reason }
                }
                return nil
            }
            #expect(reason == "closed by the server (messageTooLarge)", "\(reason ?? "none")")
        }
    }

    /// Each reconnect resends the change and is closed again, right after authorizing: the
    /// delay between attempts grows (50 ms doubling to 400 ms here) instead of starting over.
    @Test func aServerClosingEveryConnectionIsRetriedLessAndLessOften() async throws {
        try await overrunTheServer { states in
            // Seven attempts take about a second alone; the bound is for a loaded machine, and
            // the retry times seen so far are reported if it is reached.
            let seen = Mutex<[Date]>([])
            _ = try? await withTimeout(.seconds(60)) { () async in
                for await state in states {
                    if case .offline(_, let retryAt?, _) = state {
                        if seen.withLock({ $0.append(retryAt); return $0.count }) == 7 { break }
                    }
                }
            }
            let retries = seen.withLock { $0 }
            // The time from one retry to the next is that attempt's life plus the next delay: at
            // least the delay, however late this test reads the states (once, past the whole
            // delay on a loaded machine). With jitter (x 0.5-1.0), the sixth delay is at least
            // 200 ms; starting over, at most 50 (and a quick attempt's life on top).
            let gaps = zip(retries.dropFirst(), retries).map { $0.timeIntervalSince($1) }
            #expect(gaps.count == 6 && gaps[5] >= 0.15, "\(gaps)")
        }
    }

    @Test func aBurstTooLargeForOneMessageGoesOutInSeveral() async throws {
        try await run { a, b in
            // Six saves of ~20 KB handed over together, as the mount hands over a burst.
            let keys = (0..<6).map { "part\($0)" }
            let changes = try keys.map { key in
                let value: JSONObject = ["text": .string(key + String(repeating: "y", count: 20_000))]
                return try #require(try a.store.saveLocal(bucket: "notes", key: key, value: value).readyToSend)
            }
            await a.client.send(changes)
            #expect(try await eventually { try keys.allSatisfy { try b.value($0) != nil } })
            try await a.idle()
            for key in keys { #expect(try a.store.entity(bucket: "notes", key: key)?.state == .synced) }
            #expect(await a.client.connectionCounter == 1)
        }
    }
}
