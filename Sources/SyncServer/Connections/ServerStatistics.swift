import Foundation
import NIOConcurrencyHelpers
import Prometheus

/// Counts of what the server holds open and what it has done, for logs, benchmarks, tests and
/// `/metrics` (a connection that should have been closed shows up here, whatever the peer does).
/// Each server has its own, with its own Prometheus registry: tests run servers side by side.
public final class ServerStatistics: Sendable {
    private struct Counts {
        var connections = 0
        var webSockets = 0
        /// HTTP connections the server closed, by reason (`ConnectionActivity`).
        var closes: [String: Int] = [:]
    }

    private let counts = NIOLockedValueBox(Counts())
    /// Every connection's channel, weakly: one still alive after its connection closed is a
    /// leak (issue 20: each WebSocket connection kept its channel and ~6 KiB for good).
    private let channels = NIOLockedValueBox([WeakChannel]())
    /// What `/metrics` renders (`--metrics-port`, README "Health and metrics").
    let registry: PrometheusCollectorRegistry
    // The handles of the series counted on every change, frame and connection, made once: the
    // registry checks a metric's name and help text, character by character, at every `make`,
    // and looks it up under its lock (issue 38: that doubled the server's instructions per
    // delivery, scripts/bench-server). Series labelled by what happens (an error code, a
    // reason) are made when first counted, and kept (`labelled`).
    private let connectionsGauge: Gauge
    private let webSocketGauges: [WebSocketProtocol: Gauge]
    private let acceptedCounters: [WebSocketProtocol: Counter]
    private let outboundBytesGauges: [WebSocketProtocol: Gauge]
    private let outboundWaitHistograms: [WebSocketProtocol: DurationHistogram]
    private let batchHistogram: ValueHistogram
    private let commitLatencyHistogram: DurationHistogram
    private let labelled = NIOLockedValueBox(LabelledSeries())

    private struct LabelledSeries {
        var counters: [String: Counter] = [:]
        var connectionWait: DurationHistogram?
    }

    // Only read and written under the lock; the channels themselves are Sendable.
    private struct WeakChannel: @unchecked Sendable {
        weak var channel: AnyObject?
    }

    /// The WebSocket protocols the server speaks, as `/metrics` labels them.
    public enum WebSocketProtocol: String, Sendable, CaseIterable {
        case simperium, telepat, apptimist
    }

    public init() {
        // Every series exists from the start, at 0, so a scrape sees the counters move from there.
        let registry = PrometheusCollectorRegistry()
        self.registry = registry
        func byProtocol<Series>(_ make: (WebSocketProtocol) -> Series) -> [WebSocketProtocol: Series] {
            Dictionary(uniqueKeysWithValues: WebSocketProtocol.allCases.map { ($0, make($0)) })
        }
        webSocketGauges = byProtocol { kind in
            registry.makeGauge(descriptor: Self.named("bucketfs_websockets", Help.webSockets), labels: [("protocol", kind.rawValue)])
        }
        connectionsGauge = registry.makeGauge(descriptor: Self.named("bucketfs_connections", Help.connections), labels: [("state", "open")])
        acceptedCounters = byProtocol { kind in
            registry.makeCounter(descriptor: Self.named("bucketfs_changes_accepted_total", Help.accepted), labels: [("protocol", kind.rawValue)])
        }
        batchHistogram = registry.makeValueHistogram(
            descriptor: Self.named("bucketfs_commit_batch_changes", Help.batch), buckets: Self.batchBuckets)
        commitLatencyHistogram = registry.makeDurationHistogram(
            descriptor: Self.named("bucketfs_change_commit_seconds", Help.latency), buckets: Self.latencyBuckets)
        outboundBytesGauges = byProtocol { kind in
            registry.makeGauge(descriptor: Self.named("bucketfs_outbound_queued_bytes", Help.outboundBytes), labels: [("protocol", kind.rawValue)])
        }
        outboundWaitHistograms = byProtocol { kind in
            registry.makeDurationHistogram(
                descriptor: Self.named("bucketfs_outbound_wait_seconds", Help.outboundWait), labels: [("protocol", kind.rawValue)],
                buckets: Self.latencyBuckets)
        }
    }

    /// Accepted connections (HTTP or WebSocket) whose handling has not ended.
    public var openConnections: Int { counts.withLockedValue { $0.connections } }
    /// WebSocket connections whose endpoint is still running.
    public var openWebSockets: Int { counts.withLockedValue { $0.webSockets } }

    /// Channels of connections that are still referenced (open or leaked).
    public var liveChannels: Int {
        channels.withLockedValue { channels in
            channels.removeAll { $0.channel == nil }
            return channels.count
        }
    }

    /// HTTP connections closed by the server so far, by reason: a deadline ("no request",
    /// "request not complete", "idle") or a refused head ("request line too long", "request head too large").
    public var closesByReason: [String: Int] { counts.withLockedValue { $0.closes } }

    /// The metrics in Prometheus text format (version 0.0.4), process figures read now.
    public func prometheusText() -> String {
        if let resident = ProcessFigures.residentBytes() {
            registry.makeGauge(descriptor: Self.named("process_resident_memory_bytes", Help.resident)).set(Double(resident))
        }
        if let open = ProcessFigures.openDescriptors() {
            registry.makeGauge(descriptor: Self.named("process_open_fds", Help.descriptors)).set(Double(open))
        }
        return registry.emitToString()
    }

    func track(_ channel: AnyObject) {
        channels.withLockedValue { channels in
            // Pruned as it grows, so tracking costs a slot per live connection only.
            if channels.count >= 1024, channels.count.isMultiple(of: 1024) { channels.removeAll { $0.channel == nil } }
            channels.append(WeakChannel(channel: channel))
        }
    }

    /// Counts a close for `reason`; true the first time for that reason (the one to log).
    func countClose(reason: String) -> Bool {
        counter("bucketfs_http_closes_total", Help.closes, labels: [("reason", reason)]).increment()
        return counts.withLockedValue { counts in
            counts.closes[reason, default: 0] += 1
            return counts.closes[reason] == 1
        }
    }

    func connectionOpened() {
        counts.withLockedValue { $0.connections += 1 }
        connectionsGauge.increment()
    }

    func connectionClosed() {
        counts.withLockedValue { $0.connections -= 1 }
        connectionsGauge.decrement()
    }

    func webSocketOpened(_ kind: WebSocketProtocol) {
        counts.withLockedValue { $0.webSockets += 1 }
        webSocketGauges[kind]?.increment()
    }

    func webSocketClosed(_ kind: WebSocketProtocol) {
        counts.withLockedValue { $0.webSockets -= 1 }
        webSocketGauges[kind]?.decrement()
    }

    /// A change committed, made `via` a protocol (a Simperium change, a Telepat create, update or
    /// delete, an Apptimist WRITE or REMOVE), `latency` after it was submitted.
    func changeAccepted(via kind: WebSocketProtocol, latency: Duration) {
        acceptedCounters[kind]?.increment()
        changeCommitted(latency: latency)
    }

    /// A change answered with error `code` (the protocol's own), by the store after `latency`
    /// or before it.
    func changeRefused(via kind: WebSocketProtocol, code: Int, latency: Duration? = nil) {
        counter("bucketfs_changes_refused_total", Help.refused, labels: [("protocol", kind.rawValue), ("code", "\(code)")]).increment()
        if let latency { changeCommitted(latency: latency) }
    }

    /// The bytes queued for `kind`'s connections (`FrameOutbox`) grew or shrank by `change`.
    func outboundBytesChanged(_ kind: WebSocketProtocol, by change: Int) {
        guard let gauge = outboundBytesGauges[kind] else { return }
        if change > 0 { gauge.increment(by: Double(change)) } else { gauge.decrement(by: Double(-change)) }
    }

    /// Frames for `kind`'s connections left their outboxes for the socket after `waits`.
    func outboundFramesWaited(_ kind: WebSocketProtocol, _ waits: [Duration]) {
        guard let histogram = outboundWaitHistograms[kind] else { return }
        for wait in waits { histogram.record(wait) }
    }

    /// A commit of `changes` changes in one transaction (`CommitQueue`).
    func batchCommitted(changes: Int) {
        batchHistogram.record(Double(changes))
    }

    /// A 429 answered by `api` ("auth", "telepat").
    func tooManyRequests(api: String) {
        counter("bucketfs_http_too_many_requests_total", Help.tooMany, labels: [("api", api)]).increment()
    }

    /// What the database connection did (PostgreSQL).
    func database(_ event: DatabaseEvent) {
        switch event {
        case .listenLost:
            counter("bucketfs_postgres_listen_lost_total", Help.listenLost, labels: []).increment()
        case .connectionWait(let waited):
            let histogram = labelled.withLockedValue { series in
                if let made = series.connectionWait { return made }
                let made = registry.makeDurationHistogram(
                    descriptor: Self.named("bucketfs_database_connection_wait_seconds", Help.connectionWait), buckets: Self.latencyBuckets)
                series.connectionWait = made
                return made
            }
            histogram.record(waited)
        }
    }

    /// The database did not answer `operation` ("change", "auth", "readiness").
    func databaseUnavailable(operation: String) {
        counter("bucketfs_database_unavailable_total", Help.unavailable, labels: [("operation", operation)]).increment()
    }

    private func changeCommitted(latency: Duration) {
        commitLatencyHistogram.record(latency)
    }

    /// The counter `name` with `labels`, made the first time it is counted, then kept.
    private func counter(_ name: String, _ help: String, labels: [(String, String)]) -> Counter {
        let key = ([name] + labels.flatMap { [$0.0, $0.1] }).joined(separator: "\u{0}")
        return labelled.withLockedValue { series in
            if let made = series.counters[key] { return made }
            let made = labels.isEmpty
                ? registry.makeCounter(descriptor: Self.named(name, help))
                : registry.makeCounter(descriptor: Self.named(name, help), labels: labels)
            series.counters[key] = made
            return made
        }
    }

    /// A metric's full name (no unit part: the names say theirs) and its help text.
    private static func named(_ name: String, _ help: String) -> MetricNameDescriptor {
        MetricNameDescriptor(metricName: name, unitName: "", helpText: help)
    }

    private static let batchBuckets: [Double] = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000]
    private static let latencyBuckets: [Duration] = [
        .milliseconds(1), .milliseconds(2), .milliseconds(5), .milliseconds(10), .milliseconds(25), .milliseconds(50),
        .milliseconds(100), .milliseconds(250), .milliseconds(500), .seconds(1), .seconds(2.5), .seconds(5), .seconds(10),
    ]

    private enum Help {
        static let connections = "Accepted connections (HTTP or WebSocket) not yet closed."
        static let webSockets = "WebSocket connections open, by protocol."
        static let accepted = "Changes committed, by protocol."
        static let refused = "Changes answered with an error, by protocol and the protocol's error code."
        static let batch = "Changes per commit transaction (group commit)."
        static let latency = "Seconds from a change's submission to its commit or refusal."
        static let closes = "HTTP connections closed by the server: a deadline or a refused request head, by reason."
        static let tooMany = "Requests answered 429 Too Many Requests, by API."
        static let unavailable = "Operations that found the database unavailable, by operation."
        static let listenLost = "Times the PostgreSQL LISTEN connection (other nodes' commits) was lost and made again."
        static let connectionWait = "Seconds a statement waited for a pooled PostgreSQL connection."
        static let resident = "Resident memory of the server process, in bytes."
        static let descriptors = "Open file descriptors of the server process."
        static let outboundBytes = "Bytes queued for connections and not yet written to their sockets, by protocol."
        static let outboundWait = "Seconds a frame (a broadcast change: the fan-out delay; or a reply) waited in its connection's queue for the socket, by protocol."
    }
}

/// Figures of the running process, from /proc (Linux); nil where there is none.
enum ProcessFigures {
    static func residentBytes() -> Int? {
        guard let statm = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return nil }
        let fields = statm.split(separator: " ")
        guard fields.count > 1, let pages = Int(fields[1]) else { return nil }
        return pages * Int(getpagesize())
    }

    static func openDescriptors() -> Int? {
        (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")).map(\.count)
    }
}
