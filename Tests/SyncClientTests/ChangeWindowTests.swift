import Foundation
import Synchronization
import JSONDiff
import SyncEngine
import SyncStore
import Testing
@testable import SyncClient

/// A burst of saves larger than `maxChangesInFlight`: the rest waits in the store, queued, and
/// goes as the server answers; nothing is lost, no answer is waited for in vain, and a file
/// saved again meanwhile goes once with its last content. Every path a change takes to the
/// wire is covered: the engine's own save, changes handed over in a batch (a mount's saves),
/// and what a reconnect owes.
@Suite("the window of changes in flight", .serialized, .timeLimit(.minutes(3)))
struct ChangeWindowTests {
    static let window = 8
    static let files = 300

    /// Runs `body` while a side task samples how many of `client`'s changes the store records as
    /// sent (in flight); returns the most it saw.
    func mostInFlight(_ client: TestClient, during body: () async throws -> Void) async throws -> Int {
        let most = Atomic<Int>(0)
        let sampling = Atomic<Bool>(true)
        let sampler = Task.detached {
            while sampling.load(ordering: .relaxed) {
                if let sent = try? client.store.stats().sentChanges { most.max(sent) }
                try? await Task.sleep(for: .milliseconds(1))
            }
        }
        let outcome: Result<Void, any Error>
        do { try await body(); outcome = .success(()) } catch { outcome = .failure(error) }
        sampling.store(false, ordering: .relaxed)
        await sampler.value
        try outcome.get()
        return most.load(ordering: .relaxed)
    }

    func value(_ file: Int, round: Int) -> JSONObject { ["file": .integer(Int64(file)), "round": .integer(Int64(round))] }

    /// b holds every file's last value, a owes nothing, and a never lost its connection.
    func expectDelivered(_ a: TestClient, _ b: TestClient, rounds: Int, connections: Int = 1) async throws {
        let last = rounds - 1
        #expect(try await eventually(.seconds(90)) {
            try (0..<Self.files).allSatisfy { try b.value("f\($0)") == value($0, round: $0 % 10 == 0 ? last : 0) }
        })
        try await a.idle()
        #expect(try a.store.stats().queuedChanges == 0 && a.store.stats().sentChanges == 0)
        #expect(await a.client.connectionCounter == connections)
        #expect(await a.client.heldBack.isEmpty)
    }

    /// Client a, whose window is `window`, and client b, both started and in sync.
    func withPair(_ body: (SyncFixture, TestClient, TestClient) async throws -> Void) async throws {
        try await SyncFixture.run { fixture in
            let a = try await fixture.client("a") { configuration in
                configuration.maxChangesInFlight = Self.window
                configuration.useDefaultHeartbeat()  // the tests count connections
            }
            let b = try await fixture.client("b")
            await a.client.start()
            await b.client.start()
            try await a.idle()
            try await b.idle()
            try await body(fixture, a, b)
        }
    }

    @Test func savesThroughTheEngineWaitPastTheWindowAndEveryOneArrives() async throws {
        try await withPair { _, a, b in
            let rounds = 3
            let most = try await mostInFlight(a) {
                for file in 0..<Self.files {
                    _ = try await a.client.save(bucket: "notes", key: "f\(file)", value: value(file, round: 0))
                }
                // Every tenth file is saved again while the burst is still going out.
                for round in 1..<rounds {
                    for file in stride(from: 0, to: Self.files, by: 10) {
                        _ = try await a.client.save(bucket: "notes", key: "f\(file)", value: value(file, round: round))
                    }
                }
                try await expectDelivered(a, b, rounds: rounds)
            }
            #expect(most <= Self.window, "\(most) changes in flight")
            #expect(most >= Self.window / 2, "the window was used: \(most)")
        }
    }

    /// A mount hands the engine the changes its saves queued in the store, many at a time.
    @Test func aBatchHandedOverPastTheWindowWaitsAndEveryOneArrives() async throws {
        try await withPair { _, a, b in
            let most = try await mostInFlight(a) {
                var batch: [OutgoingChange] = []
                for file in 0..<Self.files {
                    let saved = try a.store.saveLocal(bucket: "notes", key: "f\(file)", value: value(file, round: 0), markingSent: false)
                    batch += saved.readyToSend.map { [$0] } ?? []
                }
                #expect(batch.count == Self.files)
                await a.client.send(batch)
                #expect(await a.client.heldBack == ["notes"])
                #expect(try a.store.stats().queuedChanges >= Self.files - Self.window)
                try await expectDelivered(a, b, rounds: 1)
            }
            #expect(most <= Self.window, "\(most) changes in flight")
        }
    }

    /// Saved offline, the burst is owed at the reconnect: it goes through the window too.
    @Test func whatAReconnectOwesGoesThroughTheWindow() async throws {
        try await withPair { fixture, a, b in
            await fixture.server.stop()
            #expect(try await eventually { await a.client.connection == nil })
            for file in 0..<Self.files {
                _ = try await a.client.save(bucket: "notes", key: "f\(file)", value: value(file, round: 0))
            }
            #expect(try a.store.stats().queuedChanges == Self.files)
            let most = try await mostInFlight(a) {
                try await fixture.server.start()
                try await expectDelivered(a, b, rounds: 1, connections: 2)
            }
            #expect(most <= Self.window, "\(most) changes in flight")
            #expect(most >= Self.window / 2, "the window was used: \(most)")
        }
    }
}

extension Atomic where Value == Int {
    /// Raises the value to `candidate` if it is larger.
    func max(_ candidate: Int) {
        var current = load(ordering: .relaxed)
        while candidate > current {
            let (exchanged, original) = compareExchange(expected: current, desired: candidate, ordering: .relaxed)
            if exchanged { return }
            current = original
        }
    }
}
