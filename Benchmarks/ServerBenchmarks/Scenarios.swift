import BenchmarkSupport
import Foundation

/// A note-shaped create (Simplenote fields) of `key`, as a reference client sends it.
func createFrame(clientID: String, key: String, ccid: String) -> String {
    let content = "Note \(key): " + String(repeating: "lorem ipsum dolor sit amet ", count: 8)
    return #"0:c:{"clientid":"\#(clientID)","id":"\#(key)","o":"M","v":{"content":{"o":"+","v":"\#(content)"},"tags":{"o":"+","v":[]},"deleted":{"o":"+","v":false},"modificationDate":{"o":"+","v":1700000000.25}},"ccid":"\#(ccid)"}"#
}

func initFrame(token: String, clientID: String) -> String {
    #"0:init:{"clientid":"\#(clientID)","api":1.1,"token":"\#(token)","app_id":"bench-app","name":"notes","library":"bench","version":"1"}"#
}

/// One pipelining client: keeps `window` requests in flight until it has sent `total`.
private final class PipelinedClient: @unchecked Sendable {
    enum Kind { case changes, heartbeats }

    let clientID: String
    private let kind: Kind
    private let total: Int
    private let window: Int
    private let ackMarker: [UInt8]
    private let errorMarker = Array(#""error":"#.utf8)
    private let ccidsMarker = Array(#""ccids":"#.utf8)
    private let lock = NSLock()
    private var sent = 0
    private var socket: BenchSocket?
    let authorized = Countdown(1)
    let acknowledged: Countdown
    let broadcastsSeen: Countdown
    private let failures: FailureBox

    init(clientID: String, kind: Kind, total: Int, window: Int, expectedBroadcasts: Int, failures: FailureBox) {
        self.clientID = clientID
        self.kind = kind
        self.total = total
        self.window = window
        self.failures = failures
        ackMarker = Array(#""clientid":"\#(clientID)""#.utf8)
        acknowledged = Countdown(total)
        broadcastsSeen = Countdown(kind == .changes ? expectedBroadcasts : 0)
    }

    func attach(_ socket: BenchSocket) { lock.withLock { self.socket = socket } }

    func onText(_ text: String) {
        if text.hasPrefix("0:c:") {
            if text.utf8.containsBytes(errorMarker) {
                failures.record("change refused: \(text.prefix(300))")
                return
            }
            // The server merges queued broadcasts into one message: count changes, not messages.
            broadcastsSeen.tick(text.utf8.occurrences(of: ccidsMarker))
            let acks = text.utf8.occurrences(of: ackMarker)
            if acks > 0 {
                acknowledged.tick(acks)
                sendNext(count: acks)
            }
        } else if text.hasPrefix("h:") {
            acknowledged.tick()
            sendNext()
        } else if text.hasPrefix("0:auth:") {
            authorized.tick()
        } else {
            failures.record("unexpected frame: \(text.prefix(300))")
        }
    }

    /// Fills the window (at start) or replaces the request just answered.
    func sendNext(count: Int = 1) {
        for _ in 0..<count {
            let next: (BenchSocket, Int)? = lock.withLock {
                guard sent < total, let socket = self.socket else { return nil }
                sent += 1
                return (socket, sent)
            }
            guard let next else { return }
            let (socket, number) = next
            switch kind {
            case .changes:
                socket.send(createFrame(clientID: clientID, key: "\(clientID)-\(number)", ccid: UUID().uuidString.lowercased()))
            case .heartbeats:
                socket.send("h:\(number)")
            }
        }
    }

    func start() { sendNext(count: window) }
}

final class FailureBox: @unchecked Sendable {
    private let lock = NSLock()
    private var messages: [String] = []
    func record(_ message: String) { lock.withLock { if messages.count < 5 { messages.append(message) } } }
    func check() throws {
        let all = lock.withLock { messages }
        if !all.isEmpty { throw BenchFailure(all.joined(separator: "\n")) }
    }
}

struct ThroughputRun {
    /// Every change acknowledged to its sender (durable and broadcast).
    var acceptedPerSecond: Double
    /// Every change also delivered to every other client of the bucket.
    var broadcastPerSecond: Double
}

/// `clients` connections on one user's bucket each send `perClient` creates (or `h` heartbeats),
/// `window` in flight at a time. Every change is broadcast to all `clients` connections. With
/// `spreadOver` nodes (sharing one database), client i connects to node i mod their count.
func runThroughput(
    server: BenchServer, spreadOver others: [BenchServer] = [], run: String, clients: Int, perClient: Int, window: Int, heartbeats: Bool
) async throws -> ThroughputRun {
    let nodes = [server] + others
    let token = try await server.makeUser("tput-\(run)@bench")
    let failures = FailureBox()
    let drivers = (0..<clients).map {
        PipelinedClient(
            clientID: "b\(run)c\($0)", kind: heartbeats ? .heartbeats : .changes, total: perClient, window: window,
            expectedBroadcasts: clients * perClient, failures: failures
        )
    }
    var sockets: [BenchSocket] = []
    let started: ContinuousClock.Instant
    let acknowledged: ContinuousClock.Instant
    let delivered: ContinuousClock.Instant
    do {
        for (index, driver) in drivers.enumerated() {
            let socket = try await BenchSocket.connect(port: nodes[index % nodes.count].port) { driver.onText($0) }
            driver.attach(socket)
            sockets.append(socket)
            socket.send(initFrame(token: token, clientID: driver.clientID))
            try await driver.authorized.wait()
        }
        started = ContinuousClock.now
        for driver in drivers { driver.start() }
        for driver in drivers { try await driver.acknowledged.wait() }
        acknowledged = ContinuousClock.now
        for driver in drivers { try await driver.broadcastsSeen.wait() }
        delivered = ContinuousClock.now
        try failures.check()
    } catch {
        for socket in sockets { await socket.close() }
        throw error
    }
    for socket in sockets { await socket.close() }
    let total = Double(clients * perClient)
    return ThroughputRun(
        acceptedPerSecond: total / (acknowledged - started).seconds,
        broadcastPerSecond: total / (delivered - started).seconds
    )
}

/// Records when each fan-out change was sent and when each subscriber saw it.
private final class FanOutRecorder: @unchecked Sendable {
    private let lock = NSLock()
    private var sentAt: [ContinuousClock.Instant?]
    private(set) var deliveries: [[Duration]]
    private var pending: Countdown?
    private let failures: FailureBox
    let authorized: Countdown

    init(changes: Int, subscribers: Int, failures: FailureBox) {
        authorized = Countdown(subscribers)
        sentAt = Array(repeating: nil, count: changes)
        deliveries = Array(repeating: [], count: changes)
        self.failures = failures
    }

    func sending(_ index: Int, subscribers: Int) -> Countdown {
        let countdown = Countdown(subscribers)
        lock.withLock {
            pending = countdown
            sentAt[index] = ContinuousClock.now
        }
        return countdown
    }

    /// A subscriber's frame; keys are `f-<index>`.
    func received(_ text: String) {
        let now = ContinuousClock.now
        guard text.hasPrefix("0:c:") else {
            if text.hasPrefix("0:auth:") { authorized.tick() } else { failures.record("unexpected frame: \(text.prefix(300))") }
            return
        }
        guard let range = text.range(of: #""id":"f-"#) else {
            failures.record("unexpected change: \(text.prefix(300))")
            return
        }
        let digits = text[range.upperBound...].prefix { $0.isNumber }
        guard let index = Int(digits) else { return }
        let countdown: Countdown? = lock.withLock {
            guard index < sentAt.count, let sent = sentAt[index] else { return nil }
            deliveries[index].append(now - sent)
            return pending
        }
        countdown?.tick()
    }

    var all: [[Duration]] { lock.withLock { deliveries } }
}

/// Answers the writer's heartbeats for the baseline round trip.
private final class Echo: @unchecked Sendable {
    private let lock = NSLock()
    private var waiter: Countdown?
    func expect() -> Countdown { lock.withLock { let c = Countdown(1); waiter = c; return c } }
    func onText(_ text: String) {
        if text.hasPrefix("h:") { lock.withLock { waiter }?.tick() }
    }
}

struct FanOutRun {
    /// Send to receipt, one entry per (change, subscriber).
    var deliveries: [Duration]
    /// Send to receipt by the last of the subscribers, one entry per change.
    var lastDeliveries: [Duration]
    /// Baseline: the writer's `h` round trip on the same server with the same subscribers connected.
    var heartbeatRoundTrips: [Duration]
}

/// One writer and `subscribers` other connections on one bucket; the writer sends `changes`
/// creates one at a time (each once every subscriber has the previous one). The subscribers
/// connect to `subscriberNode` when given (another node on the writer's database).
func runFanOut(
    server: BenchServer, subscriberNode: BenchServer? = nil, run: String, subscribers: Int, changes: Int
) async throws -> FanOutRun {
    let token = try await server.makeUser("fan-\(run)@bench")
    let failures = FailureBox()
    let recorder = FanOutRecorder(changes: changes, subscribers: subscribers, failures: failures)
    var sockets: [BenchSocket] = []
    for index in 0..<subscribers {
        let socket = try await BenchSocket.connect(port: (subscriberNode ?? server).port) { recorder.received($0) }
        sockets.append(socket)
        socket.send(initFrame(token: token, clientID: "f\(run)s\(index)"))
    }
    let echo = Echo()
    let writerAuthorized = Countdown(1)
    let writer = try await BenchSocket.connect(port: server.port) { text in
        if text.hasPrefix("0:auth:") { writerAuthorized.tick() }
        echo.onText(text)
    }
    sockets.append(writer)
    writer.send(initFrame(token: token, clientID: "f\(run)w"))
    try await writerAuthorized.wait()
    try await recorder.authorized.wait()

    var roundTrips: [Duration] = []
    for index in 0..<changes {
        let reply = echo.expect()
        let started = ContinuousClock.now
        writer.send("h:\(index)")
        try await reply.wait()
        roundTrips.append(ContinuousClock.now - started)

        let countdown = recorder.sending(index, subscribers: subscribers)
        writer.send(createFrame(clientID: "f\(run)w", key: "f-\(index)", ccid: UUID().uuidString.lowercased()))
        try await countdown.wait()
        try failures.check()
    }
    for socket in sockets { await socket.close() }
    let all = recorder.all
    return FanOutRun(
        deliveries: all.flatMap { $0 },
        lastDeliveries: all.compactMap { $0.max() },
        heartbeatRoundTrips: roundTrips
    )
}

extension Duration {
    var seconds: Double {
        let parts = components
        return Double(parts.seconds) + Double(parts.attoseconds) / 1e18
    }

    var microseconds: Int { Int(seconds * 1e6) }
}

/// The `p`-th percentile (0...100) by nearest rank.
func percentile(_ values: [Duration], _ p: Double) -> Duration {
    let sorted = values.sorted()
    guard !sorted.isEmpty else { return .zero }
    let rank = Int((p / 100 * Double(sorted.count)).rounded(.up))
    return sorted[max(0, min(sorted.count - 1, rank - 1))]
}

func milliseconds(_ duration: Duration) -> String {
    String(format: "%.2f ms", duration.seconds * 1000)
}

extension String.UTF8View {
    /// Whether `needle` occurs.
    func containsBytes(_ needle: [UInt8]) -> Bool { occurrences(of: needle) > 0 }

    /// How often `needle` occurs (without overlaps): a plain byte search (Foundation's
    /// `contains` costs the client side of the benchmark more CPU than the server spends per
    /// change).
    func occurrences(of needle: [UInt8]) -> Int {
        guard let first = needle.first else { return 0 }
        return withContiguousStorageIfAvailable { bytes -> Int in
            guard bytes.count >= needle.count else { return 0 }
            var found = 0
            var index = 0
            let last = bytes.count - needle.count
            while index <= last {
                if bytes[index] == first {
                    var matched = 1
                    while matched < needle.count, bytes[index + matched] == needle[matched] { matched += 1 }
                    if matched == needle.count {
                        found += 1
                        index += needle.count
                        continue
                    }
                }
                index += 1
            }
            return found
        } ?? (String(self).components(separatedBy: String(decoding: needle, as: UTF8.self)).count - 1)
    }
}
