import Foundation
import JSONDiff
import SyncStore
import Testing
@testable import SyncClient

/// A small deterministic generator so a failing run can be replayed from its seed.
struct SeededGenerator: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed == 0 ? 0x9E37_79B9_7F4A_7C15 : seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

@Suite("randomized: 3 clients, random edits, offline periods, convergence", .serialized, .timeLimit(.minutes(3)))
struct RandomizedModelTests {
    static var seeds: [UInt64] { RandomizedModel.seeds(count: 3) }

    @Test(arguments: seeds) func clientsConvergeAfterRandomConcurrentEdits(seed: UInt64) async throws {
        try await run(seed: seed, allowDeletes: true)
    }

    /// Without deletes every field a client added must survive every merge: nothing is lost.
    /// (Text edits run too but are not checked: diff-match-patch merges of adjacent concurrent
    /// edits are fuzzy by design, e.g. base "<2>start<15>" merged with two offline edits.)
    @Test(arguments: seeds) func noAddedFieldIsLostWithoutDeletes(seed: UInt64) async throws {
        try await run(seed: seed, allowDeletes: false)
    }

    func run(seed: UInt64, allowDeletes: Bool) async throws {
        let server = try TestServer()
        try await server.start()
        let directory = try TemporaryDirectory()
        do {
            let model = RandomizedModel(seed: seed, allowDeletes: allowDeletes, steps: 60, servers: [server], clientNames: ["a", "b", "c"])
            try await model.run(token: try await server.makeToken(), directory: directory)
        } catch {
            Issue.record(error, "seed \(seed)")
        }
        await server.cleanup()
        directory.remove()
    }
}

/// The randomized model both the one-server and the two-node tests run: clients of one user,
/// each with its own store, create, edit and delete four keys at random and go offline and come
/// back; at the end every client holds the same entities (and, without deletes, every field any
/// client added).
struct RandomizedModel {
    var seed: UInt64
    var allowDeletes: Bool
    /// At most this many operations...
    var steps: Int
    /// ...and none started after this long.
    var timeLimit: Duration = .seconds(60)
    /// Client i connects to server i mod their count.
    var servers: [TestServer]
    var clientNames: [String]
    /// Whether a client coming back online may come back on another server, with its store.
    var moveOnReconnect = false

    /// Seeds for a run: SYNC_MODEL_SEED's alone when set (a replay), else `count` random ones.
    static func seeds(count: Int) -> [UInt64] {
        if let text = ProcessInfo.processInfo.environment["SYNC_MODEL_SEED"], let seed = UInt64(text) { return [seed] }
        return (0..<count).map { _ in UInt64.random(in: 1...UInt64.max) }
    }

    /// Runs the model, records every divergence as an issue (with the seed), and returns the
    /// converged entities (key -> value) with the clients still running, for `check`; shuts the
    /// clients down before returning.
    @discardableResult
    func run(
        token: String, directory: TemporaryDirectory, check: ([TestClient], [String: JSONObject]) async throws -> Void = { _, _ in }
    ) async throws -> [String: JSONObject] {
        print("randomized model seed \(seed) deletes \(allowDeletes) (replay with SYNC_MODEL_SEED=\(seed))")
        var random = SeededGenerator(seed: seed)
        var clients: [TestClient] = []
        var homes: [Int] = []
        do {
            for (index, name) in clientNames.enumerated() {
                homes.append(index % servers.count)
                clients.append(try await TestClient.make(name, server: servers[homes[index]], token: token, directory: directory))
            }
            let result = try await drive(&clients, homes: &homes, random: &random, directory: directory, token: token)
            try await check(clients, result)
            for client in clients { await client.shutdown() }
            return result
        } catch {
            for client in clients { await client.shutdown() }
            throw error
        }
    }

    private func drive(
        _ clients: inout [TestClient], homes: inout [Int], random: inout SeededGenerator, directory: TemporaryDirectory, token: String
    ) async throws -> [String: JSONObject] {
        var online = Array(repeating: true, count: clients.count)
        var insertions: [String: [String]] = [:]
        let keys = ["k0", "k1", "k2", "k3"]
        let fields = ["title", "body", "count", "tag", "tag"]
        for client in clients { await client.client.start() }
        for client in clients { try await client.idle() }
        if !allowDeletes {
            // Keys exist everywhere first: concurrent creations legitimately let one side win.
            for key in keys { _ = try await clients[0].client.save(bucket: "notes", key: key, value: ["body": "start"]) }
            let everyone = clients
            #expect(try await eventually { try everyone.allSatisfy { try $0.value("k3") != nil } })
        }
        let deadline = ContinuousClock.now + timeLimit
        for step in 0..<steps where ContinuousClock.now < deadline {
            let index = Int.random(in: 0..<clients.count, using: &random)
            let client = clients[index]
            let key = keys[Int.random(in: 0..<keys.count, using: &random)]
            switch Int.random(in: 0..<10, using: &random) {
            case 0:
                // Toggle connectivity.
                if online[index] {
                    await client.client.stop()
                } else if moveOnReconnect, servers.count > 1, Bool.random(using: &random) {
                    // Back on another server with the same store: it resumes from its cv there.
                    await client.shutdown()
                    homes[index] = (homes[index] + 1) % servers.count
                    clients[index] = try await TestClient.make(client.name, server: servers[homes[index]], token: token, directory: directory)
                    await clients[index].client.start()
                } else {
                    await client.client.start()
                }
                online[index].toggle()
            case 1 where allowDeletes:
                if try client.store.lookup(bucket: "notes", name: .entity(key: key)) != nil {
                    do {
                        try await client.client.delete(bucket: "notes", key: key)
                    } catch {
                        // Removed by another client's change applied since the lookup: gone, as
                        // this step wanted (rm of a file another program removed first).
                        guard case .store(.unknownEntity) = error else { throw error }
                    }
                }
            default:
                // Read-modify-write in one store transaction, like an editor that reloads
                // before saving: a remote change applied meanwhile is not overwritten.
                let field = fields[Int.random(in: 0..<fields.count, using: &random)]
                let number = Int64.random(in: 0..<100, using: &random)
                let pick = Int.random(in: 0..<1000, using: &random)
                let marker = "<\(step)>"
                if field == "tag" { insertions[key, default: []].append("tag\(step)") }
                let name = client.name
                _ = try await client.client.modify(bucket: "notes", key: key) { current in
                    var value = current ?? [:]
                    switch field {
                    case "count":
                        value[JSONKey(field)] = .integer(number)
                    case "tag":
                        value["tag\(step)"] = .string(name)
                    case "body":
                        // Only between markers, so a marker is never split by another.
                        var text = value[JSONKey(field)]?.stringValue ?? "start"
                        var boundaries = [0, text.count]
                        for (position, character) in text.enumerated() where character == ">" { boundaries.append(position + 1) }
                        let offset = boundaries[pick % boundaries.count]
                        text.insert(contentsOf: marker, at: text.index(text.startIndex, offsetBy: offset))
                        value[JSONKey(field)] = .string(text)
                    default:
                        value[JSONKey(field)] = .string("\(name)-\(step)")
                    }
                    return value
                }
            }
            if Int.random(in: 0..<4, using: &random) == 0 { try await Task.sleep(for: .milliseconds(30)) }
        }
        for (index, client) in clients.enumerated() where !online[index] { await client.client.start() }
        let everyone = clients
        let converged = try await eventually(.seconds(60)) {
            for client in everyone where !(await client.client.isIdle()) { return false }
            let snapshots = try everyone.map { try snapshot($0.store) }
            return snapshots.allSatisfy { $0 == snapshots[0] }
        }
        let snapshots = try clients.map { try snapshot($0.store) }
        if !converged {
            var report = "seed \(seed): clients did not converge"
            for (client, snapshot) in zip(clients, snapshots) {
                report += "\n\(client.name): " + snapshot.keys.sorted().map { key in
                    let entity = try? client.store.entity(bucket: "notes", key: key)
                    return "\(key)@v\(entity?.version ?? -1)=\(JSONValue.object(snapshot[key] ?? [:]).compactRendered())"
                }.joined(separator: " ")
            }
            for client in clients {
                let phase = await client.client.phaseDescription(bucket: "notes") ?? "?"
                let owed = try client.store.outgoingChanges(bucket: "notes").map { "\($0.key):\($0.state):sv\($0.sourceVersion ?? -1)" }
                let reloads = try client.store.pendingReloads(bucket: "notes")
                let unsynced = try client.store.unsyncedEntities().map { "\($0.key):\($0.state):v\($0.version ?? -1):\($0.reason ?? "")" }
                report += "\n\(client.name): idle=\(await client.client.isIdle()) phase=\(phase) state=\(client.client.connectionState) owed=\(owed) reloads=\(reloads) unsynced=\(unsynced)"
            }
            Issue.record(Comment(rawValue: report))
        }
        if !allowDeletes, let final = snapshots.first {
            for (key, tags) in insertions {
                let value = final[key] ?? [:]
                for tag in tags where value[JSONKey(tag)] == nil {
                    Issue.record("seed \(seed): field \(tag) lost from \(key): \(value)")
                }
            }
        }
        for client in clients {
            for entity in try client.store.unsyncedEntities() {
                Issue.record("seed \(seed): \(client.name) has \(entity.key) in state \(entity.state) \(entity.reason ?? "")")
            }
        }
        return snapshots.first ?? [:]
    }
}

/// Key -> value of every entity that has a file.
func snapshot(_ store: SyncStore) throws -> [String: JSONObject] {
    var result: [String: JSONObject] = [:]
    for entry in try store.entries(bucket: "notes") {
        guard case .entity(let key) = entry.name else { continue }
        result[key] = try store.entity(bucket: "notes", key: key)?.value ?? [:]
    }
    return result
}
