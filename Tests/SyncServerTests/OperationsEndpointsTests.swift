import Foundation
import JSONDiff
import NIOConcurrencyHelpers
import PostgresTestSupport
import SyncProtocol
@testable import SyncServer
import Testing

/// Issue 38 ("Running the server for real"): `/healthz` and `/readyz` for a load balancer,
/// `/metrics` on a listener of its own, oversized request heads answered at once, and deadline
/// closes counted rather than logged one error line each. Bounds are hang guards.
@Suite(.timeLimit(.minutes(5)))
struct OperationsEndpointsTests {
    @Test func healthAndReadinessAnswerWithoutAuth() async throws {
        try await withServer { server in
            let health = try await httpGet(port: server.port, "/healthz")
            #expect(health.status == 200, "\(health)")
            #expect(health.body.contains(#""status":"ok""#))
            let ready = try await httpGet(port: server.port, "/readyz")
            #expect(ready.status == 200, "\(ready)")
            #expect(ready.body.contains(#""status":"ready""#))
            // Metrics are not published on the public port.
            #expect(try await httpGet(port: server.port, "/metrics").status == 404)
        }
    }

    @Test func readinessFollowsPostgreSQLOfARealNode() async throws {
        let cluster = try await PostgresCluster.started()
        defer { cluster.remove() }
        let database = try await cluster.createDatabase()
        let logs = try TemporaryDirectory()
        defer { logs.remove() }
        let node = try await ServeBinary(data: logs.path, database: cluster.url(database: database), extraArguments: ["--metrics-port", "0"])
        defer { node.stop() }
        #expect(try await httpGet(port: node.port, "/readyz").status == 200)

        try await cluster.stop(mode: "fast")
        // Not ready within a few probes, each answered by the readiness check (bounded at 2 s;
        // how long an answer took is not asserted: a loaded machine stretched one past 4 s).
        let down = try await probe(port: node.port, "/readyz", until: { $0.status == 503 }, within: .seconds(30))
        #expect(down.answer.body.contains("store unavailable"))
        // The process itself still answers.
        #expect(try await httpGet(port: node.port, "/healthz").status == 200)
        let metrics = try await httpGet(port: try await node.metricsPort(), "/metrics").body
        #expect(try #require(sample(metrics, #"bucketfs_database_unavailable_total{operation="readiness"}"#)) >= 1)

        try await cluster.start()
        _ = try await probe(port: node.port, "/readyz", until: { $0.status == 200 }, within: .seconds(90))
        // The LISTEN connection was lost with the database (and is made again); statements
        // waited for pooled connections.
        let after = try await httpGet(port: try await node.metricsPort(), "/metrics").body
        #expect(try #require(sample(after, "bucketfs_postgres_listen_lost_total"), "\(after)") >= 1)
        #expect(try #require(sample(after, "bucketfs_database_connection_wait_seconds_count")) >= 1)
    }

    @Test func anOversizedHeaderOrURLIsAnsweredAtOnce() async throws {
        // A deadline far away: the answer must not wait for it.
        let statistics = ServerStatistics()
        try await withServer(configure: {
            $0.requestTimeout = .seconds(60)
            $0.statistics = statistics
        }) { server in
            // Both answers come within 20 s, a third of the deadline: they did not wait for it.
            let header = try await RawTCP.open(port: server.port)
            header.send(Array("GET /healthz HTTP/1.1\r\nHost: x\r\nX-Long: ".utf8) + Array(repeating: UInt8(ascii: "a"), count: 200_000))
            let headerAnswer = try #require(await header.readUntilClosed(within: .seconds(20)))
            #expect(headerAnswer.hasPrefix("HTTP/1.1 431 "), "\(headerAnswer)")

            let url = try await RawTCP.open(port: server.port)
            url.send(Array("GET /".utf8) + Array(repeating: UInt8(ascii: "a"), count: 100_000) + Array(" HTTP/1.1\r\nHost: x\r\n\r\n".utf8))
            let urlAnswer = try #require(await url.readUntilClosed(within: .seconds(20)))
            #expect(urlAnswer.hasPrefix("HTTP/1.1 414 "), "\(urlAnswer)")

            // Heads within the bounds are served as before, on a connection of their own.
            let fine = try await httpGet(port: server.port, "/healthz", extraHeader: "X-Long: " + String(repeating: "a", count: 32_000))
            #expect(fine.status == 200)
            #expect(statistics.closesByReason["request head too large"] == 1)
            #expect(statistics.closesByReason["request line too long"] == 1)
        }
    }

    @Test func metricsCountConnectionsAndChangesUnderLoad() async throws {
        let metricsPort = NIOLockedValueBox<Int?>(nil)
        try await withServer(configure: { configuration in
            configuration.metrics = .init(port: 0) { port in metricsPort.withLockedValue { $0 = port } }
        }) { server in
            let port = try await waitFor { metricsPort.withLockedValue { $0 } }
            let before = try await httpGet(port: port, "/metrics")
            #expect(before.status == 200)
            #expect(sample(before.body, #"bucketfs_changes_accepted_total{protocol="simperium"}"#) == 0)

            let token = try await makeUser(server)
            let socket = try await server.socket()
            _ = try await socket.authorize(token: token)
            for index in 0..<3 { _ = try await create(socket, key: "note\(index)", object: ["n": .integer(Int64(index))]) }
            // A change to an entity that does not exist: refused with 404.
            let refused = try await socket.request(#"0:c:{"id":"missing","o":"-","sv":1,"ccid":"\#(newCCID())"}"#)
            #expect(refused.contains("404"), "\(refused)")

            let during = try await httpGet(port: port, "/metrics").body
            #expect(sample(during, #"bucketfs_changes_accepted_total{protocol="simperium"}"#) == 3, "\(during)")
            #expect(sample(during, #"bucketfs_changes_refused_total{protocol="simperium",code="404"}"#) == 1)
            #expect(sample(during, #"bucketfs_websockets{protocol="simperium"}"#) == 1)
            #expect(try #require(sample(during, "bucketfs_commit_batch_changes_count")) >= 1)
            #expect(sample(during, "bucketfs_change_commit_seconds_count") == 4)
            #expect(try #require(sample(during, #"bucketfs_connections{state="open"}"#)) >= 1)
            #expect(try #require(sample(during, "process_resident_memory_bytes")) > 1_000_000)
            #expect(try #require(sample(during, "process_open_fds")) > 3)
            // Every frame the connection got waited in its queue and was counted (the auth reply,
            // three acknowledgements, the refusal).
            #expect(try #require(sample(during, #"bucketfs_outbound_wait_seconds_count{protocol="simperium"}"#)) >= 5)
            await socket.close()
            // The WebSocket gauge comes back down once the connection is gone.
            _ = try await waitFor {
                sample(try await httpGet(port: port, "/metrics").body, #"bucketfs_websockets{protocol="simperium"}"#) == 0 ? true : nil
            }
            // Nothing stays queued for a connection that is gone.
            _ = try await waitFor {
                sample(try await httpGet(port: port, "/metrics").body, #"bucketfs_outbound_queued_bytes{protocol="simperium"}"#) == 0 ? true : nil
            }
        }
    }

    /// Issue 38: SIGTERM closes idle HTTP keep-alive connections (and ones that never sent a
    /// request) at once, instead of waiting the whole grace period for them; a connected
    /// WebSocket client is still given its close.
    @Test func sigtermClosesIdleKeepAliveConnectionsAtOnce() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        // A grace and deadlines longer than the hang guard: an exit within the guard waited for
        // neither.
        let node = try await ServeBinary(data: directory.path, extraArguments: ["--shutdown-grace", "600", "--request-timeout", "600"])
        defer { node.stop() }
        let keptAlive = try await RawTCP.open(port: node.port)
        keptAlive.send(Array("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n".utf8))
        #expect(await keptAlive.readUntilClosed(within: hangGuard, orContaining: #""status":"ok""#)?.hasPrefix("HTTP/1.1 200") == true)
        let silent = try await RawTCP.open(port: node.port)
        #expect(await node.signal(SIGTERM, within: hangGuard) != nil, "\(node.log())")
        #expect(await keptAlive.readUntilClosed(within: hangGuard) != nil)
        #expect(await silent.readUntilClosed(within: hangGuard) != nil)
    }

    /// Issue 38: `--log-format json` writes every log record as one JSON object per line, with
    /// the record's metadata as fields (the standard output's announcements aside).
    @Test func jsonLogsAreOneObjectPerLineWithTheirMetadata() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let node = try await ServeBinary(data: directory.path, extraArguments: ["--log-format", "json", "--request-timeout", "1"])
        defer { node.stop() }
        // Records with metadata: the descriptor limit at start, a connection closed at its deadline.
        let idle = try await RawTCP.open(port: node.port)
        #expect(await idle.readUntilClosed(within: hangGuard) != nil)
        #expect(await node.signal(SIGTERM, within: hangGuard) != nil)
        let lines = node.log().split(separator: "\n").filter { !$0.hasPrefix("bucketfs server listening") }
        #expect(lines.count >= 3, "\(lines)")
        var fields: Set<String> = []
        for line in lines {
            guard case .object(let record)? = try? JSONValue(parsing: Array(line.utf8)) else {
                Issue.record("not a JSON object: \(line)")
                continue
            }
            for key in ["time", "level", "label", "message", "source"] { #expect(record[JSONKey(key)]?.stringValue != nil, "\(key) in \(line)") }
            fields.formUnion(record.keys.map(\.string))
        }
        #expect(fields.contains("reason") && fields.contains("limit"), "\(fields)")
    }

    @Test func aFloodOfStuckConnectionsLogsNoErrorPerConnection() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let node = try await ServeBinary(data: directory.path, extraArguments: ["--request-timeout", "3", "--metrics-port", "0"])
        defer { node.stop() }
        // Half never send a byte, half never finish their request. A half-request whose bytes
        // reach the server after its deadline (this test waited that long for a pool thread
        // once) is closed as one that never sent any: the counts are bounds, their sum exact.
        var connections: [RawTCP] = []
        for index in 0..<200 {
            let connection = try await RawTCP.open(port: node.port)
            if index.isMultiple(of: 2) { connection.send(Array("GET /sock/1/test-app/websocket HTTP/1.1\r\nHost: x\r\n".utf8)) }
            connections.append(connection)
        }
        for connection in connections { #expect(await connection.readUntilClosed(within: .seconds(30)) != nil) }
        let metrics = try await httpGet(port: try await node.metricsPort(), "/metrics").body
        let noRequest = try #require(sample(metrics, #"bucketfs_http_closes_total{reason="no request"}"#), "\(metrics)")
        let notComplete = try #require(sample(metrics, #"bucketfs_http_closes_total{reason="request not complete"}"#), "\(metrics)")
        #expect(noRequest + notComplete == 200 && noRequest >= 100 && notComplete >= 1, "\(noRequest) no request, \(notComplete) not complete")
        let lines = node.log().split(separator: "\n")
        let errors = lines.filter { $0.contains(" error ") }
        #expect(errors.count <= 5, "\(errors.prefix(10).joined(separator: "\n"))")
        // One info line per reason, not one per connection.
        #expect(lines.filter { $0.contains("closing an HTTP connection") }.count == 2, "\(lines.suffix(20).joined(separator: "\n"))")
    }
}

/// One `GET` on a connection of its own (`Connection: close`): the status and the body.
func httpGet(port: Int, _ path: String, extraHeader: String? = nil) async throws -> (status: Int, body: String) {
    try await httpRequest(port: port, "GET", path, extraHeader: extraHeader)
}

/// One request on a connection of its own (`Connection: close`), from the loopback address
/// `source` when given: the status and the body.
func httpRequest(
    port: Int, _ method: String, _ path: String, extraHeader: String? = nil, body: String? = nil, from source: String? = nil
) async throws -> (status: Int, body: String) {
    let answer = try await httpExchange(port: port, method, path, extraHeader: extraHeader, body: body, from: source)
    return (answer.status, answer.body)
}

/// `httpRequest`, with the answer's head (status line and headers) too.
func httpExchange(
    port: Int, _ method: String, _ path: String, extraHeader: String? = nil, body: String? = nil, from source: String? = nil
) async throws -> (status: Int, head: String, body: String) {
    let connection = try await RawTCP.open(port: port, from: source)
    var header = extraHeader.map { $0 + "\r\n" } ?? ""
    if let body { header += "Content-Length: \(body.utf8.count)\r\n" }
    connection.send(Array("\(method) \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\n\(header)Connection: close\r\n\r\n\(body ?? "")".utf8))
    guard let answer = await connection.readUntilClosed(within: hangGuard) else { throw TestFailure("no answer to \(method) \(path)") }
    guard answer.hasPrefix("HTTP/1.1 "), let status = Int(answer.dropFirst(9).prefix(3)) else { throw TestFailure("not an HTTP answer: \(answer)") }
    guard let split = answer.range(of: "\r\n\r\n") else { return (status, answer, "") }
    return (status, String(answer[..<split.lowerBound]), String(answer[split.upperBound...]))
}

/// Asks `path` every 200 ms until an answer satisfies `done`: that answer, and how long it took.
private func probe(
    port: Int, _ path: String, until done: ((status: Int, body: String)) -> Bool, within limit: Duration
) async throws -> (answer: (status: Int, body: String), took: Duration) {
    let deadline = ContinuousClock.now + limit
    var last: (status: Int, body: String)?
    while ContinuousClock.now < deadline {
        let asked = ContinuousClock.now
        let answer = try await httpGet(port: port, path)
        if done(answer) { return (answer, ContinuousClock.now - asked) }
        last = answer
        try await Task.sleep(for: .milliseconds(200))
    }
    throw TestFailure("GET \(path) never answered as expected within \(limit); last: \(String(describing: last))")
}

/// Polls `value` every 20 ms until it is not nil.
private func waitFor<T>(_ value: () async throws -> T?) async throws -> T {
    let deadline = ContinuousClock.now + hangGuard
    while ContinuousClock.now < deadline {
        if let found = try await value() { return found }
        try await Task.sleep(for: .milliseconds(20))
    }
    throw TestFailure("condition not met within \(hangGuard)")
}

/// The value of the sample `series` (a name, with its labels as rendered) in Prometheus text.
func sample(_ text: String, _ series: String) -> Double? {
    for line in text.split(separator: "\n") where line.hasPrefix(series + " ") {
        return Double(line.dropFirst(series.count + 1).split(separator: " ").first ?? "")
    }
    return nil
}
