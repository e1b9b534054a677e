import BenchmarkSupport
import Foundation
import GRDB
import JSONDiff
import Logging
import SyncClient
import SyncStore

/// Latencies of one run, each sample next to a baseline sample taken in the same loop.
struct LatencyRun {
    /// A's `save` call until A's acknowledgement stream reports its ccid.
    var saveToAck: [Duration] = []
    /// A's `save` call until B's remote-event stream reports the new version.
    var saveToRemoteEvent: [Duration] = []
    /// A bare `h` round trip on a raw WebSocket to the same server (no storage, no broadcast).
    var heartbeat: [Duration] = []
    /// One bare SQLite commit of a row with an fsync (WAL, synchronous=FULL) on the same disk:
    /// a durable save costs at least one, and the path to an ack at least two (client, server).
    var syncedCommit: [Duration] = []
    /// The `save` call alone (durable in the store, change written to the socket).
    var saveCall: [Duration] = []
}

/// Times single-row commits that fsync, in a scratch database next to the clients' stores.
final class SyncedCommitProbe {
    private let directory = temporaryPath("bucketfs-sync-bench-fsync")
    private let queue: DatabaseQueue

    init() throws {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        var configuration = Configuration()
        configuration.prepareDatabase { db in try db.execute(sql: "PRAGMA synchronous = FULL") }
        queue = try DatabaseQueue(path: directory + "/fsync.sqlite", configuration: configuration)
        try queue.writeWithoutTransaction { db in
            _ = try String.fetchOne(db, sql: "PRAGMA journal_mode = WAL")
            try db.execute(sql: "CREATE TABLE t (id INTEGER PRIMARY KEY, data TEXT NOT NULL)")
        }
    }

    func commit(_ data: String) throws -> Duration {
        let start = ContinuousClock.now
        try queue.write { db in try db.execute(sql: "INSERT INTO t (data) VALUES (?)", arguments: [data]) }
        return ContinuousClock.now - start
    }

    func remove() {
        try? queue.close()
        try? FileManager.default.removeItem(atPath: directory)
    }
}

/// A connected client over a fresh store in a temp dir.
final class BenchClient: Sendable {
    let client: SyncClient
    let store: SyncStore
    private let directory: String

    init(server: BenchServer, token: String, bucket: String, name: String) async throws {
        directory = temporaryPath("bucketfs-sync-bench-\(name)")
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        store = try SyncStore(path: directory + "/store.sqlite")
        let configuration = SyncClientConfiguration(
            serverURL: server.url, appID: benchAppID, buckets: [bucket], clientID: "\(name)-\(UUID().uuidString.prefix(8))"
        ) { token }
        var logger = Logger(label: "sync-bench-\(name)")
        logger.logLevel = .error
        client = try SyncClient(configuration: configuration, store: store, logger: logger)
        await client.start()
        guard await client.waitUntilIdle(timeout: .seconds(30)) else { throw BenchFailure("\(name) did not sync") }
    }

    func stop() async {
        await client.stop()
        try? store.close()
        try? FileManager.default.removeItem(atPath: directory)
    }
}

/// What each timed save changes in the note.
enum SaveKind: String, CaseIterable, Sendable {
    /// A few words typed into the body and the modification date bumped: what an editor's save
    /// usually is, sent as a small `d` delta.
    case edit
    /// The whole ~900-character body replaced by an unrelated one: diff-match-patch's worst case
    /// (Myers' O(N·D) with D close to N costs about 3 ms of diffing on this machine).
    case rewrite

    /// The value of save `sample`, given the previous one.
    func value(sample: Int, previous: JSONObject) -> JSONObject {
        switch self {
        case .rewrite:
            var value = Documents.object(sample % 1000)
            value["counter"] = .integer(Int64(sample))
            return value
        case .edit:
            var value = previous
            var body = Array((previous["content"]?.stringValue ?? "").utf16)
            let position = body.isEmpty ? 0 : (sample &* 7919) % body.count
            body.insert(contentsOf: "typed \(sample) ".utf16, at: position)
            if body.count > 2000 { body.removeLast(body.count - 2000) }
            value["content"] = .string(String(decoding: body, as: UTF16.self))
            value["modificationDate"] = .double(1_700_000_100.25 + Double(sample))
            return value
        }
    }
}

func runLatency(server: BenchServer, token: String, bucket: String, samples: Int, kind: SaveKind) async throws -> LatencyRun {
    let writer = try await BenchClient(server: server, token: token, bucket: bucket, name: "writer")
    let reader = try await BenchClient(server: server, token: token, bucket: bucket, name: "reader")
    let heartbeats = HeartbeatProbe()
    let socket = try await BenchSocket.connect(port: server.port) { text in heartbeats.received(text) }
    defer { Task { await socket.close() } }
    var acks = writer.client.acknowledgements().makeAsyncIterator()
    var events = reader.client.remoteEvents().makeAsyncIterator()
    let key = "latency-note"
    let commits = try SyncedCommitProbe()
    defer { commits.remove() }
    var run = LatencyRun()
    // Sample 0 creates the entity (and warms both paths); it is not recorded.
    var value = Documents.object(0)
    for sample in 0...samples {
        value = kind.value(sample: sample, previous: value)
        let start = ContinuousClock.now
        let saved = try await writer.client.save(bucket: bucket, key: key, value: value)
        let savedAt = ContinuousClock.now
        guard let ccid = saved.readyToSend?.ccid else { throw BenchFailure("save \(sample) queued nothing to send") }
        var ackVersion: Int?
        while let ack = await acks.next() {
            if ack.ccid == ccid {
                ackVersion = ack.version
                break
            }
        }
        let acked = ContinuousClock.now
        guard let version = ackVersion else { throw BenchFailure("no acknowledgement for save \(sample)") }
        var eventAt: ContinuousClock.Instant?
        while let event = await events.next() {
            if event.key == key, let eventVersion = event.version, eventVersion >= version {
                eventAt = ContinuousClock.now
                break
            }
        }
        guard let received = eventAt else { throw BenchFailure("no remote event for save \(sample)") }
        let heartbeat = try await heartbeats.roundTrip(socket: socket, number: sample)
        let commit = try commits.commit(JSONValue.object(value).compactRendered())
        if sample > 0 {
            run.syncedCommit.append(commit)
            run.saveCall.append(savedAt - start)
            run.saveToAck.append(acked - start)
            run.saveToRemoteEvent.append(received - start)
            run.heartbeat.append(heartbeat)
        }
    }
    await writer.stop()
    await reader.stop()
    return run
}

/// Times `h:n` round trips on a raw socket.
final class HeartbeatProbe: @unchecked Sendable {
    private let lock = NSLock()
    private var waiter: Countdown?

    func received(_ text: String) {
        if text.hasPrefix("h:") { lock.withLock { waiter }?.tick() }
    }

    func roundTrip(socket: BenchSocket, number: Int) async throws -> Duration {
        let countdown = Countdown(1)
        lock.withLock { waiter = countdown }
        let start = ContinuousClock.now
        socket.send("h:\(number)")
        try await countdown.wait(limit: .seconds(10))
        return ContinuousClock.now - start
    }
}

/// The `p`-th percentile (0...100) by nearest rank.
func percentile(_ values: [Duration], _ p: Double) -> Duration {
    guard !values.isEmpty else { return .zero }
    let sorted = values.sorted()
    let rank = Int((p / 100 * Double(sorted.count)).rounded(.up)) - 1
    return sorted[min(max(rank, 0), sorted.count - 1)]
}

func milliseconds(_ duration: Duration) -> String {
    String(format: "%.3f ms", duration.seconds * 1000)
}
