import BenchmarkSupport
import Foundation

/// Where a comparison run's nodes keep their data.
enum StoreSetup: CaseIterable {
    case sqlite
    case onePostgresNode
    case twoPostgresNodes

    var name: String {
        switch self {
        case .sqlite: "SQLite node"
        case .onePostgresNode: "1 PostgreSQL node"
        case .twoPostgresNodes: "2 PostgreSQL nodes"
        }
    }
}

/// What one store setup measured.
struct StoreRun {
    var setup: StoreSetup
    var throughput: ThroughputRun
    var heartbeats: ThroughputRun
    var fanOut: FanOutRun
    /// CPU seconds of this process (the nodes and the benchmark's clients) per change, and per
    /// `h` in the heartbeat baseline (the clients' and WebSocket share of it).
    var processCPUPerChange: Double
    var processCPUPerHeartbeat: Double
    /// CPU seconds of the PostgreSQL cluster's processes per change.
    var databaseCPUPerChange: Double
}

/// Throughput (clients spread over the nodes), CPU per change, and fan-out from a writer on the
/// first node to subscribers on the last, for one setup. Starts and stops its nodes.
func runStoreSetup(
    _ setup: StoreSetup, cluster: BenchPostgres, run: String, clients: Int, perClient: Int, window: Int, subscribers: Int, changes: Int
) async throws -> StoreRun {
    var nodes: [BenchServer] = []
    do {
        switch setup {
        case .sqlite:
            nodes = [try await BenchServer.start()]
        case .onePostgresNode, .twoPostgresNodes:
            let url = try cluster.createDatabase("bench_\(run)")
            nodes.append(try await BenchServer.start(databaseURL: url))
            if setup == .twoPostgresNodes { nodes.append(try await BenchServer.start(databaseURL: url)) }
        }
        let others = Array(nodes.dropFirst())
        let heartbeatCPU = processCPUSeconds()
        let heartbeats = try await runThroughput(
            server: nodes[0], spreadOver: others, run: "\(run)h", clients: clients, perClient: perClient, window: window, heartbeats: true)
        let changeCPU = processCPUSeconds()
        let databaseCPU = cluster.cpuSeconds()
        let throughput = try await runThroughput(
            server: nodes[0], spreadOver: others, run: "\(run)c", clients: clients, perClient: perClient, window: window, heartbeats: false)
        let total = Double(clients * perClient)
        let processPerChange = (processCPUSeconds() - changeCPU) / total
        let databasePerChange = (cluster.cpuSeconds() - databaseCPU) / total
        let fanOut = try await runFanOut(server: nodes[0], subscriberNode: nodes.last, run: "\(run)f", subscribers: subscribers, changes: changes)
        for node in nodes { await node.stop() }
        return StoreRun(
            setup: setup, throughput: throughput, heartbeats: heartbeats, fanOut: fanOut,
            processCPUPerChange: processPerChange, processCPUPerHeartbeat: (changeCPU - heartbeatCPU) / total,
            databaseCPUPerChange: databasePerChange
        )
    } catch {
        for node in nodes { await node.stop() }
        throw error
    }
}

/// The comparison as a table, each setup's rates as ratios to the SQLite node's in the same run.
func storeComparisonReport(_ runs: [StoreRun]) -> String {
    guard let base = runs.first else { return "" }
    let baseP99 = percentile(base.fanOut.deliveries, 99)
    var lines = ["store comparison (ratios to \(base.setup.name), same run):"]
    for run in runs {
        let p99 = percentile(run.fanOut.deliveries, 99)
        lines.append(
            "  \(run.setup.name): \(Int(run.throughput.acceptedPerSecond)) changes/s accepted"
                + String(format: " (x%.2f)", run.throughput.acceptedPerSecond / base.throughput.acceptedPerSecond)
                + ", \(Int(run.throughput.broadcastPerSecond)) delivered to all"
                + String(format: " (x%.2f)", run.throughput.broadcastPerSecond / base.throughput.broadcastPerSecond)
                + "; fan-out p50 \(milliseconds(percentile(run.fanOut.deliveries, 50))), p99 \(milliseconds(p99))"
                + String(format: " (x%.2f)", p99.seconds / max(baseP99.seconds, 1e-9))
                + String(format: "; CPU per change: bench process %.0f us (its h baseline %.0f us), PostgreSQL %.0f us",
                         run.processCPUPerChange * 1e6, run.processCPUPerHeartbeat * 1e6, run.databaseCPUPerChange * 1e6)
        )
    }
    return lines.joined(separator: "\n")
}
