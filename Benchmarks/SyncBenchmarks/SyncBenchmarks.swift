import BenchmarkSupport
import Benchmark
import Foundation
import JSONDiff

// The sync engine against the real server on 127.0.0.1 (port 0, real SQLite, real WebSockets,
// all in this process sharing the machine's cores), each number next to a baseline measured in
// the same iteration: a bare SQLite insert loop of the same rows for the first sync, a raw
// WebSocket `h` heartbeat round trip and one fsync'd SQLite commit (the disk's floor) for the latencies.
// Issue 4 targets: first sync of 100,000 ~1 KB entities <= 10 s (>= 10,000 entities/s);
// save-to-ack and remote-change-to-event p50 <= 2 ms, p99 <= 10 ms.

let firstSyncEntities = ProcessInfo.processInfo.environment["SYNC_BENCH_ENTITIES"].flatMap(Int.init) ?? 100_000
let firstSyncPageLimit = ProcessInfo.processInfo.environment["SYNC_BENCH_PAGE"].flatMap(Int.init) ?? 500
let latencySamples = 500

let entitiesPerSecond = BenchmarkMetric.custom("entities/s", polarity: .prefersLarger, useScalingFactor: false)
let baselineRowsPerSecond = BenchmarkMetric.custom("baseline: SQLite rows/s", polarity: .prefersLarger, useScalingFactor: false)
let saveToAckLatency = BenchmarkMetric.custom("save-to-ack (us)", polarity: .prefersSmaller, useScalingFactor: false)
let remoteEventLatency = BenchmarkMetric.custom("save-to-remote-event (us)", polarity: .prefersSmaller, useScalingFactor: false)
let heartbeatLatency = BenchmarkMetric.custom("baseline: h round trip (us)", polarity: .prefersSmaller, useScalingFactor: false)
let syncedCommitLatency = BenchmarkMetric.custom("baseline: fsync'd SQLite commit (us)", polarity: .prefersSmaller, useScalingFactor: false)

nonisolated(unsafe) var server: BenchServer?
nonisolated(unsafe) var token = ""
nonisolated(unsafe) var runCounter = 0

let benchmarks: @Sendable () -> Void = {
    Benchmark.defaultConfiguration = .init(
        metrics: [.wallClock],
        warmupIterations: 0,
        maxDuration: .seconds(120),
        maxIterations: 3
    )

    Benchmark(
        "first sync: \(firstSyncEntities) x ~1 KB entities, pages of \(firstSyncPageLimit)",
        configuration: .init(
            metrics: [.wallClock, entitiesPerSecond, baselineRowsPerSecond],
            setup: {
                let started = try await BenchServer.start()
                token = try await started.makeUser("first-sync")
                let seedStart = ContinuousClock.now
                try await Seeding.seed(server: started, token: token, bucket: "notes", count: firstSyncEntities)
                print("seeded \(firstSyncEntities) entities in \(String(format: "%.1f", (ContinuousClock.now - seedStart).seconds)) s (not measured)")
                server = started
            },
            teardown: { await server?.stop(); server = nil }
        )
    ) { benchmark in
        guard let server else { throw BenchFailure("no server") }
        let rows = (0..<firstSyncEntities).map { index in
            (key: Documents.key(index), data: JSONValue.object(Documents.object(index)).compactRendered())
        }
        let baseline = try runSQLiteBaseline(rows: rows)
        benchmark.startMeasurement()
        let run = try await runFirstSync(
            server: server, token: token, bucket: "notes", expected: firstSyncEntities, pageLimit: firstSyncPageLimit)
        benchmark.stopMeasurement()
        benchmark.measurement(entitiesPerSecond, Int(run.entitiesPerSecond))
        benchmark.measurement(baselineRowsPerSecond, Int(baseline.entitiesPerSecond))
        print(String(
            format: "first sync: %d entities in %.2f s = %.0f entities/s; baseline bare SQLite insert %.2f s = %.0f rows/s; ratio %.1fx the floor",
            run.entities, run.duration.seconds, run.entitiesPerSecond, baseline.duration.seconds, baseline.entitiesPerSecond,
            run.duration.seconds / max(baseline.duration.seconds, 1e-9)
        ))
    }

    for kind in SaveKind.allCases {
        Benchmark(
            "latency (\(kind.rawValue)): save-to-ack and save-to-remote-event, \(latencySamples) saves, 2 clients",
            configuration: .init(
                metrics: [.wallClock, saveToAckLatency, remoteEventLatency, heartbeatLatency, syncedCommitLatency],
                setup: {
                    server = try await BenchServer.start()
                    token = try await server?.makeUser("latency") ?? ""
                },
                teardown: { await server?.stop(); server = nil }
            )
        ) { benchmark in
            guard let server else { throw BenchFailure("no server") }
            runCounter += 1
            let run = try await runLatency(server: server, token: token, bucket: "latency\(runCounter)", samples: latencySamples, kind: kind)
            for sample in run.saveToAck { benchmark.measurement(saveToAckLatency, sample.microseconds) }
            for sample in run.saveToRemoteEvent { benchmark.measurement(remoteEventLatency, sample.microseconds) }
            for sample in run.heartbeat { benchmark.measurement(heartbeatLatency, sample.microseconds) }
            for sample in run.syncedCommit { benchmark.measurement(syncedCommitLatency, sample.microseconds) }
            let commitP50 = percentile(run.syncedCommit, 50)
            print(
                "\(kind.rawValue): baseline fsync'd SQLite commit: p50 \(milliseconds(commitP50)), p99 \(milliseconds(percentile(run.syncedCommit, 99)));"
                    + " the path to an ack holds two (client save, server commit); the save call alone: p50 \(milliseconds(percentile(run.saveCall, 50))), p99 \(milliseconds(percentile(run.saveCall, 99)))"
            )
            let baselineP50 = percentile(run.heartbeat, 50)
            let baselineP99 = percentile(run.heartbeat, 99)
            for (name, samples) in [("save-to-ack", run.saveToAck), ("save-to-remote-event", run.saveToRemoteEvent)] {
                let p50 = percentile(samples, 50)
                let p99 = percentile(samples, 99)
                print(
                    "\(kind.rawValue) \(name): p50 \(milliseconds(p50)), p99 \(milliseconds(p99)); baseline h round trip p50 \(milliseconds(baselineP50)), p99 \(milliseconds(baselineP99));"
                        + String(format: " ratio p50 %.1f, p99 %.1f", p50.seconds / max(baselineP50.seconds, 1e-9), p99.seconds / max(baselineP99.seconds, 1e-9))
                )
            }
        }
    }
}
