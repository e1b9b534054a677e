import BenchmarkSupport
import Benchmark
import Foundation

// The sync server under load, each number next to a baseline measured in the same iteration on
// the same server: the bare `h` heartbeat (same connections, same window, no storage, no
// broadcast). Real server on 127.0.0.1 port 0, real SQLite file (WAL, synchronous=FULL) in a
// temp dir, real WebSocket clients in this process (they share the machine's cores with it).
// Issue 3 targets: >= 10,000 changes/s accepted with 10 concurrent clients; p99 fan-out to 100
// subscribers <= 50 ms.

let throughputClients = 10
let changesPerClient = 2_000
let clientWindow = 64
let fanOutSubscribers = 100
let fanOutChanges = 200

let changesPerSecond = BenchmarkMetric.custom("changes/s accepted", polarity: .prefersLarger, useScalingFactor: false)
let broadcastPerSecond = BenchmarkMetric.custom("changes/s delivered to all 10", polarity: .prefersLarger, useScalingFactor: false)
let heartbeatsPerSecond = BenchmarkMetric.custom("baseline: h/s", polarity: .prefersLarger, useScalingFactor: false)
let fanOutLatency = BenchmarkMetric.custom("fan-out latency (us)", polarity: .prefersSmaller, useScalingFactor: false)
let lastSubscriberLatency = BenchmarkMetric.custom("fan-out to last of 100 (us)", polarity: .prefersSmaller, useScalingFactor: false)
let heartbeatLatency = BenchmarkMetric.custom("baseline: h round trip (us)", polarity: .prefersSmaller, useScalingFactor: false)

let soakAcksPerSecond = BenchmarkMetric.custom("soak: acks/s", polarity: .prefersLarger, useScalingFactor: false)
let soakDeliveryLatency = BenchmarkMetric.custom("soak: delivery latency (us)", polarity: .prefersSmaller, useScalingFactor: false)
let soakResidentMiB = BenchmarkMetric.custom("soak: RSS at the end (MiB)", polarity: .prefersSmaller, useScalingFactor: false)

let storeAccepted = BenchmarkMetric.custom("PostgreSQL node: changes/s accepted", polarity: .prefersLarger, useScalingFactor: false)
let storeCrossNodeDelivered = BenchmarkMetric.custom("2 PostgreSQL nodes: changes/s delivered", polarity: .prefersLarger, useScalingFactor: false)
let storeCrossNodeP99 = BenchmarkMetric.custom("2 PostgreSQL nodes: fan-out A->B (us)", polarity: .prefersSmaller, useScalingFactor: false)
let storeBaselineAccepted = BenchmarkMetric.custom("baseline: SQLite node changes/s accepted", polarity: .prefersLarger, useScalingFactor: false)

nonisolated(unsafe) var server: BenchServer?
nonisolated(unsafe) var cluster: BenchPostgres?
nonisolated(unsafe) var runCounter = 0

let benchmarks: @Sendable () -> Void = {
    Benchmark.defaultConfiguration = .init(
        metrics: [.wallClock],
        warmupIterations: 1,
        maxDuration: .seconds(60),
        maxIterations: 5
    )

    Benchmark(
        "server throughput: \(throughputClients) clients x \(changesPerClient) creates, window \(clientWindow)",
        configuration: .init(
            metrics: [.wallClock, changesPerSecond, broadcastPerSecond, heartbeatsPerSecond],
            setup: { server = try await BenchServer.start() },
            teardown: { await server?.stop(); server = nil }
        )
    ) { benchmark in
        guard let server else { throw BenchFailure("no server") }
        runCounter += 1
        let baseline = try await runThroughput(
            server: server, run: "h\(runCounter)", clients: throughputClients, perClient: changesPerClient,
            window: clientWindow, heartbeats: true
        )
        let changes = try await runThroughput(
            server: server, run: "c\(runCounter)", clients: throughputClients, perClient: changesPerClient,
            window: clientWindow, heartbeats: false
        )
        benchmark.measurement(heartbeatsPerSecond, Int(baseline.acceptedPerSecond))
        benchmark.measurement(changesPerSecond, Int(changes.acceptedPerSecond))
        benchmark.measurement(broadcastPerSecond, Int(changes.broadcastPerSecond))
        print(
            "throughput: \(Int(changes.acceptedPerSecond)) changes/s accepted, \(Int(changes.broadcastPerSecond)) changes/s"
                + " delivered to all \(throughputClients) clients; baseline \(Int(baseline.acceptedPerSecond)) h/s;"
                + String(format: " ratio changes/h %.2f", changes.acceptedPerSecond / baseline.acceptedPerSecond)
        )
    }

    Benchmark(
        "server fan-out: 1 change to \(fanOutSubscribers) subscribers, \(fanOutChanges) changes",
        configuration: .init(
            metrics: [.wallClock, fanOutLatency, lastSubscriberLatency, heartbeatLatency],
            setup: { server = try await BenchServer.start() },
            teardown: { await server?.stop(); server = nil }
        )
    ) { benchmark in
        guard let server else { throw BenchFailure("no server") }
        runCounter += 1
        let run = try await runFanOut(server: server, run: "\(runCounter)", subscribers: fanOutSubscribers, changes: fanOutChanges)
        for latency in run.deliveries { benchmark.measurement(fanOutLatency, latency.microseconds) }
        for latency in run.lastDeliveries { benchmark.measurement(lastSubscriberLatency, latency.microseconds) }
        for latency in run.heartbeatRoundTrips { benchmark.measurement(heartbeatLatency, latency.microseconds) }
        let p99 = percentile(run.deliveries, 99)
        let baselineP99 = percentile(run.heartbeatRoundTrips, 99)
        print(
            "fan-out to \(fanOutSubscribers): p50 \(milliseconds(percentile(run.deliveries, 50))), p99 \(milliseconds(p99));"
                + " last subscriber p50 \(milliseconds(percentile(run.lastDeliveries, 50))), p99 \(milliseconds(percentile(run.lastDeliveries, 99)));"
                + " baseline h round trip p50 \(milliseconds(percentile(run.heartbeatRoundTrips, 50))), p99 \(milliseconds(baselineP99));"
                + String(format: " ratio p99 %.1f", p99.seconds / max(baselineP99.seconds, 1e-9))
        )
    }
    Benchmark(
        "server soak: 200 writers, 100 subscribers, slow readers, guessers, a flood",
        configuration: .init(
            metrics: [.wallClock, soakAcksPerSecond, soakDeliveryLatency, soakResidentMiB],
            warmupIterations: 0,
            maxIterations: 1,
            setup: { server = try await BenchServer.start() },
            teardown: { await server?.stop(); server = nil }
        )
    ) { benchmark in
        guard let server else { throw BenchFailure("no server") }
        runCounter += 1
        let run = try await runSoak(
            server: server, run: "\(runCounter)", writers: 200, perWriter: 20, subscribers: 100, buckets: 10,
            slowReaders: 5, guessers: 4, guessesEach: 25, flood: 300
        )
        benchmark.measurement(soakAcksPerSecond, Int(run.acksPerSecond))
        for latency in run.deliveries { benchmark.measurement(soakDeliveryLatency, latency.microseconds) }
        benchmark.measurement(soakResidentMiB, Int(run.rssEndMiB))
        print(
            "soak: \(Int(run.acksPerSecond)) acks/s; delivery p50 \(milliseconds(percentile(run.deliveries, 50))),"
                + " p99 \(milliseconds(percentile(run.deliveries, 99))) over \(run.deliveries.count) deliveries;"
                + " guesses refused \(run.guessesRefused)/\(run.guesses);"
                + String(format: " RSS %.0f -> %.0f MiB", run.rssStartMiB, run.rssEndMiB)
        )
    }

    // Issue 14 targets: one PostgreSQL node >= 5,000 changes/s; cross-node delivery p99 <= 50 ms.
    Benchmark(
        "server stores: SQLite node, 1 PostgreSQL node, 2 PostgreSQL nodes (client on A, subscribers on B)",
        configuration: .init(
            metrics: [.wallClock, storeAccepted, storeCrossNodeDelivered, storeCrossNodeP99, storeBaselineAccepted],
            warmupIterations: 0,
            maxIterations: 1,
            setup: { cluster = try BenchPostgres.start() },
            teardown: { cluster?.stop(); cluster = nil }
        )
    ) { benchmark in
        guard let cluster else { throw BenchFailure("no PostgreSQL cluster") }
        var runs: [StoreRun] = []
        for setup in StoreSetup.allCases {
            runCounter += 1
            runs.append(try await runStoreSetup(
                setup, cluster: cluster, run: "s\(runCounter)", clients: throughputClients, perClient: changesPerClient,
                window: clientWindow, subscribers: fanOutSubscribers, changes: fanOutChanges
            ))
        }
        for run in runs {
            switch run.setup {
            case .sqlite:
                benchmark.measurement(storeBaselineAccepted, Int(run.throughput.acceptedPerSecond))
            case .onePostgresNode:
                benchmark.measurement(storeAccepted, Int(run.throughput.acceptedPerSecond))
            case .twoPostgresNodes:
                benchmark.measurement(storeCrossNodeDelivered, Int(run.throughput.broadcastPerSecond))
                for latency in run.fanOut.deliveries { benchmark.measurement(storeCrossNodeP99, latency.microseconds) }
            }
        }
        print(storeComparisonReport(runs))
    }
}
