import BenchmarkSupport
import Foundation
#if canImport(Glibc)
import Glibc
#endif

// Issue 20's soak: writers and subscribers on shared buckets while a few peers misbehave (slow
// readers that never read, password guessers, a connection flood). Bounded in count; loopback
// only. Reports acknowledgements/s, delivery p99 and the process's RSS (server and clients
// share the process) at the start and the end.

struct SoakRun {
    var acksPerSecond: Double
    var deliveries: [Duration]
    var rssStartMiB: Double
    var rssEndMiB: Double
    var guessesRefused: Int
    var guesses: Int
}

/// Resident set size of this process, from /proc/self/status (0 where there is none).
func residentMiB() -> Double {
    guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
          let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") }),
          let kilobytes = Double(line.split(separator: " ").dropFirst().first ?? "")
    else { return 0 }
    return kilobytes / 1024
}

/// A client writing `perWriter` changes to its bucket and counting its acknowledgements.
private final class SoakWriter: @unchecked Sendable {
    let clientID: String
    let bucket: String
    let acknowledged: Countdown
    let authorized = Countdown(1)
    private let marker: [UInt8]

    init(clientID: String, bucket: String, changes: Int) {
        self.clientID = clientID
        self.bucket = bucket
        acknowledged = Countdown(changes)
        marker = Array("\"clientid\":\"\(clientID)\"".utf8)
    }

    func onText(_ text: String) {
        if text.hasPrefix("0:auth:") { return authorized.tick() }
        guard text.hasPrefix("0:c:") else { return }
        let count = text.utf8.occurrences(of: marker)
        if count > 0 { acknowledged.tick(count) }
    }
}

/// A subscriber recording, for each change, the time from its sending (in its key) to now.
private final class SoakSubscriber: @unchecked Sendable {
    let authorized = Countdown(1)
    let delivered: Countdown
    private let lock = NSLock()
    private(set) var latencies: [Duration] = []
    private let origin: ContinuousClock.Instant

    init(expected: Int, origin: ContinuousClock.Instant) {
        delivered = Countdown(expected)
        self.origin = origin
    }

    func onText(_ text: String) {
        if text.hasPrefix("0:auth:") { return authorized.tick() }
        guard text.hasPrefix("0:c:") else { return }
        let now = ContinuousClock.now
        // Keys are "s<writer>-<index>-<microseconds since origin>".
        var found: [Duration] = []
        var rest = Substring(text)
        while let range = rest.range(of: "\"id\":\"s") {
            rest = rest[range.upperBound...]
            let key = rest.prefix { $0 != "\"" }
            if let sent = key.split(separator: "-").last.flatMap({ Int64($0) }) {
                found.append(now - (origin + .microseconds(sent)))
            }
        }
        lock.withLock { latencies += found }
        delivered.tick(found.count)
    }
}

/// A blocking POSIX connection, for the peers that misbehave below the WebSocket client.
private final class RawPeer: @unchecked Sendable {
    let descriptor: Int32

    init?(port: Int) {
        descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var size: Int32 = 2048
        setsockopt(descriptor, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        var timeout = timeval(tv_sec: 5, tv_usec: 0)
        setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        if connected != 0 {
            close(descriptor)
            return nil
        }
    }

    deinit { close(descriptor) }

    func send(_ text: String) {
        let bytes = Array(text.utf8)
        _ = bytes.withUnsafeBytes { Glibc.send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
    }

    /// Sends one masked WebSocket text frame (payload under 64 KiB).
    func sendText(_ text: String) {
        let payload = Array(text.utf8)
        var frame: [UInt8] = [0x81, 0x80 | 126, UInt8(payload.count >> 8), UInt8(payload.count & 0xFF), 1, 2, 3, 4]
        for (index, byte) in payload.enumerated() { frame.append(byte ^ [1, 2, 3, 4][index % 4]) }
        _ = frame.withUnsafeBytes { Glibc.send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
    }

    /// The first line the server answers (blocking, bounded by the 5 s receive timeout).
    func statusLine() -> String {
        var received: [UInt8] = []
        var byte: UInt8 = 0
        while received.count < 200, recv(descriptor, &byte, 1, 0) == 1, byte != UInt8(ascii: "\n") { received.append(byte) }
        return String(decoding: received, as: UTF8.self)
    }

    static let upgrade = "GET /sock/1/\(benchAppID)/websocket HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        + "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
}

/// Runs `work` on a thread of its own (blocking sockets stay off the cooperative pool).
private func onThread<Value: Sendable>(_ work: @escaping @Sendable () -> Value) async -> Value {
    await withCheckedContinuation { continuation in
        Thread.detachNewThread { continuation.resume(returning: work()) }
    }
}

func runSoak(
    server: BenchServer, run: String, writers: Int, perWriter: Int, subscribers: Int, buckets: Int,
    slowReaders: Int, guessers: Int, guessesEach: Int, flood: Int
) async throws -> SoakRun {
    let rssStart = residentMiB()
    let token = try await server.makeUser("soak-\(run)@bench")
    let origin = ContinuousClock.now
    let bucketName: @Sendable (Int) -> String = { index in "soak\(index % buckets)" }
    func initFrame(_ clientID: String, _ bucket: String) -> String {
        #"0:init:{"clientid":"\#(clientID)","api":1.1,"token":"\#(token)","app_id":"bench-app","name":"\#(bucket)","library":"bench","version":"1"}"#
    }
    var sockets: [BenchSocket] = []
    defer { let all = sockets; Task { for socket in all { await socket.close() } } }

    // Subscribers first, so every change reaches them.
    let writersPerBucket = (0..<buckets).map { bucket in (0..<writers).filter { $0 % buckets == bucket }.count }
    var listeners: [SoakSubscriber] = []
    for index in 0..<subscribers {
        let listener = SoakSubscriber(expected: writersPerBucket[index % buckets] * perWriter, origin: origin)
        let socket = try await BenchSocket.connect(port: server.port) { listener.onText($0) }
        socket.send(initFrame("sub\(run)-\(index)", bucketName(index)))
        try await listener.authorized.wait()
        listeners.append(listener)
        sockets.append(socket)
    }
    // Slow readers on the same buckets: they get every broadcast and read none.
    let slow: [RawPeer] = await onThread {
        (0..<slowReaders).compactMap { index in
            guard let peer = RawPeer(port: server.port) else { return nil }
            peer.send(RawPeer.upgrade)
            _ = peer.statusLine()
            peer.sendText(#"0:init:{"clientid":"slow\#(index)","token":"\#(token)","name":"\#(bucketName(index))"}"#)
            return peer
        }
    }
    var drivers: [(SoakWriter, BenchSocket)] = []
    for index in 0..<writers {
        let writer = SoakWriter(clientID: "w\(run)-\(index)", bucket: bucketName(index), changes: perWriter)
        let socket = try await BenchSocket.connect(port: server.port) { writer.onText($0) }
        socket.send(initFrame(writer.clientID, writer.bucket))
        try await writer.authorized.wait()
        drivers.append((writer, socket))
        sockets.append(socket)
    }

    // Misbehaviour during the writes: guessers and a flood of idle connections.
    let guessing = Task { () -> (refused: Int, total: Int) in
        await onThread {
            var refused = 0
            for guesser in 0..<guessers {
                for guess in 0..<guessesEach {
                    guard let peer = RawPeer(port: server.port) else { continue }
                    let body = #"{"username":"soak-\#(run)@bench","password":"wrong-\#(guesser)-\#(guess)"}"#
                    peer.send("POST /1/\(benchAppID)/authorize/ HTTP/1.1\r\nHost: x\r\nX-Simperium-API-Key: k\r\nConnection: close\r\n"
                        + "Content-Length: \(body.utf8.count)\r\n\r\n\(body)")
                    if peer.statusLine().hasPrefix("HTTP/1.1 429") { refused += 1 }
                }
            }
            return (refused, guessers * guessesEach)
        }
    }
    let flooding = Task { await onThread { (0..<flood).compactMap { _ in RawPeer(port: server.port) } } }

    let started = ContinuousClock.now
    for (writer, socket) in drivers {
        for change in 0..<perWriter {
            let sent = (ContinuousClock.now - origin).microseconds
            let key = "s\(writer.clientID)-\(change)-\(sent)"
            socket.send(createFrame(clientID: writer.clientID, key: key, ccid: "\(writer.clientID)-\(change)"))
        }
    }
    for (writer, _) in drivers { try await writer.acknowledged.wait() }
    let acknowledged = ContinuousClock.now
    for listener in listeners { try await listener.delivered.wait() }
    let guesses = await guessing.value
    let held = await flooding.value
    withExtendedLifetime((slow, held)) {}
    return SoakRun(
        acksPerSecond: Double(writers * perWriter) / (acknowledged - started).seconds,
        deliveries: listeners.flatMap(\.latencies),
        rssStartMiB: rssStart, rssEndMiB: residentMiB(),
        guessesRefused: guesses.refused, guesses: guesses.total
    )
}
