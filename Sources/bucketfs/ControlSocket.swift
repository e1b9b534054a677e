import BucketFS
import Foundation
import Synchronization

/// How a command reaches a running mount for what only the mount can do: ask the server through
/// its live, authorized connection (`bucketfs history` fetching kept versions; the mount holds
/// the token, which a `--token` mount keeps nowhere else). A Unix socket per mount in the state
/// directory (`sockets/`, mode 0700; the socket 0600); one JSON line in, one JSON line out.
/// Everything else stays in files (`MountRecord`), so commands still work when the mount is gone.
enum ControlSocket {
    static var directory: String { Paths.stateDirectory + "/sockets" }

    /// The most bytes a socket's path may have (`sun_path` less its terminating zero).
    static let longestPath = MemoryLayout.size(ofValue: sockaddr_un().sun_path) - 1

    /// The mount's socket: named as its other state files are, the readable part cut so that the
    /// path fits a socket address (a deep state directory or a long mount point name).
    static func path(for mountpoint: String) -> String {
        let around = directory.utf8.count + "/.sock".utf8.count
        return directory + "/\(Paths.mountName(for: mountpoint, atMost: longestPath - around)).sock"
    }

    /// Sends one request to the mount at `mountpoint` and waits (at most `timeout` seconds) for
    /// its reply. Throws `ControlSocketError.notRunning` when no mount answers there.
    static func send(_ request: ControlRequest, mountpoint: String, timeout: Double = 30) throws -> ControlReply {
        let descriptor = try connect(to: path(for: mountpoint))
        defer { close(descriptor) }
        var wait = timeval(tv_sec: Int(timeout), tv_usec: Int((timeout - timeout.rounded(.down)) * 1_000_000))
        setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &wait, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(descriptor, SOL_SOCKET, SO_SNDTIMEO, &wait, socklen_t(MemoryLayout<timeval>.size))
        var line = try JSONEncoder.bucketfs.encode(request)
        line.append(UInt8(ascii: "\n"))
        guard writeAll(descriptor, line) else { throw ControlSocketError.failed("cannot send to the mount: \(errnoText())") }
        guard let reply = readLine(descriptor) else {
            throw ControlSocketError.failed("the mount did not answer within \(Int(timeout)) s")
        }
        do {
            return try JSONDecoder.bucketfs.decode(ControlReply.self, from: reply)
        } catch {
            throw ControlSocketError.failed("unreadable answer from the mount: \(error)")
        }
    }

    private static func connect(to path: String) throws -> Int32 {
        let descriptor = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { throw ControlSocketError.failed("socket: \(errnoText())") }
        let connected = try withAddress(path) { address, size in Glibc.connect(descriptor, address, size) == 0 }
        guard connected else {
            let reason = errnoText()
            close(descriptor)
            throw ControlSocketError.notRunning(reason)
        }
        return descriptor
    }

    /// Calls `body` with `path` as a Unix socket address.
    static func withAddress<T>(_ path: String, _ body: (UnsafePointer<sockaddr>, socklen_t) throws -> T) throws -> T {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count <= longestPath else {
            throw ControlSocketError.failed(
                "the socket path \(path) is longer than \(longestPath) bytes (set XDG_STATE_HOME to a shorter directory)")
        }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        return try withUnsafePointer(to: &address) { pointer in
            try pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { try body($0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
    }

    static func writeAll(_ descriptor: Int32, _ data: Data) -> Bool {
        data.withUnsafeBytes { raw in
            var offset = 0
            while offset < raw.count {
                let written = Glibc.send(descriptor, raw.baseAddress! + offset, raw.count - offset, Int32(MSG_NOSIGNAL))
                if written < 0 && errno == EINTR { continue }
                guard written > 0 else { return false }
                offset += written
            }
            return true
        }
    }

    /// Bytes up to the first newline (without it); nil on end of stream, error or timeout first.
    static func readLine(_ descriptor: Int32, limit: Int = 1 << 20) -> Data? {
        var line = Data()
        var buffer = [UInt8](repeating: 0, count: 4096)
        while line.count < limit {
            let count = recv(descriptor, &buffer, buffer.count, 0)
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { return nil }
            if let newline = buffer[..<count].firstIndex(of: UInt8(ascii: "\n")) {
                line.append(contentsOf: buffer[..<newline])
                return line
            }
            line.append(contentsOf: buffer[..<count])
        }
        return nil
    }

    static func errnoText() -> String { String(cString: strerror(errno)) }
}

enum ControlSocketError: Error, CustomStringConvertible {
    /// Nothing listens: the mount is not running (or predates the socket).
    case notRunning(String)
    case failed(String)

    var description: String {
        switch self {
        case .notRunning(let reason): return "the mount is not running (\(reason))"
        case .failed(let reason): return reason
        }
    }
}

/// What a command asks a running mount.
struct ControlRequest: Codable, Sendable {
    enum Operation: String, Codable, Sendable {
        /// Fetch the versions the server keeps of `bucket`/`key` into the store (`bucketfs history`).
        case fetchHistory = "fetch-history"
        /// Whether the mount is in sync with the server (`bucketfs sync`): connected, every
        /// bucket caught up on this connection, nothing owed and no entity asked for unanswered.
        case inSync = "in-sync"
    }

    var operation: Operation
    var bucket: String = ""
    var key: String = ""
}

/// The mount's answer.
struct ControlReply: Codable, Sendable {
    /// nil: done. Otherwise why not (offline, unknown entity).
    var error: String?
    /// The newest version the mount knows of the entity.
    var latestVersion: Int?
    /// Versions the server said it does not keep (dropped, or deletions).
    var notKept: [Int] = []
    /// The answer to `in-sync`.
    var inSync: Bool?
}

/// The mount's end of the control socket: accepts on a thread of its own, one thread per
/// connection (a command or two at a time), each request answered by `handler`.
final class ControlServer: Sendable {
    private let path: String
    private let listener: Int32

    /// Listens at the mount's socket path, replacing a stale socket of an earlier run.
    init(mountpoint: String, handler: @escaping @Sendable (ControlRequest) async -> ControlReply) throws {
        path = ControlSocket.path(for: mountpoint)
        try Paths.createDirectory(ControlSocket.directory)
        // Only the owner may reach the sockets (the directory guards the moment before chmod).
        chmod(ControlSocket.directory, 0o700)
        unlink(path)
        let descriptor = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { throw CommandError("cannot open the control socket: \(ControlSocket.errnoText())") }
        let bound = try ControlSocket.withAddress(path) { address, size in bind(descriptor, address, size) == 0 }
        guard bound, chmod(path, 0o600) == 0, listen(descriptor, 8) == 0 else {
            let reason = ControlSocket.errnoText()
            close(descriptor)
            throw CommandError("cannot listen on \(path): \(reason)")
        }
        listener = descriptor
        Thread.start(named: "bucketfs-ctl") {
            while true {
                let client = accept(descriptor, nil, nil)
                if client < 0 {
                    if errno == EINTR || errno == ECONNABORTED { continue }
                    return  // closed by stop()
                }
                _ = fcntl(client, F_SETFD, FD_CLOEXEC)
                Thread.start(named: "bucketfs-ctl-cl") { Self.serve(client, handler: handler) }
            }
        }
    }

    private static func serve(_ client: Int32, handler: @escaping @Sendable (ControlRequest) async -> ControlReply) {
        defer { close(client) }
        var wait = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &wait, socklen_t(MemoryLayout<timeval>.size))
        guard let line = ControlSocket.readLine(client) else { return }
        let reply: ControlReply
        if let request = try? JSONDecoder.bucketfs.decode(ControlRequest.self, from: line) {
            let answer = Mutex<ControlReply?>(nil)
            let done = DispatchSemaphore(value: 0)
            Task {
                let result = await handler(request)
                answer.withLock { $0 = result }
                done.signal()
            }
            done.wait()
            reply = answer.withLock { $0 } ?? ControlReply(error: "no answer")
        } else {
            reply = ControlReply(error: "unreadable request")
        }
        guard var data = try? JSONEncoder.bucketfs.encode(reply) else { return }
        data.append(UInt8(ascii: "\n"))
        _ = ControlSocket.writeAll(client, data)
    }

    /// Stops listening and removes the socket.
    func stop() {
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
        unlink(path)
    }
}
