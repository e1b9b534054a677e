import Foundation
import PostgresTestSupport
#if canImport(Glibc)
import Glibc
#endif

/// A plain TCP connection for misbehaving below HTTP (idle, trickled or endless requests).
/// Blocking calls run off the cooperative pool (`offThePool`), as for `RawWebSocket`.
final class RawTCP: @unchecked Sendable {
    private let descriptor: Int32

    /// - Parameter source: the loopback address it comes from (any 127.x.y.z), to play
    ///   another client's address.
    static func open(port: Int, from source: String? = nil) async throws -> RawTCP {
        try await offThePool { try RawTCP(port: port, from: source) }
    }

    private init(port: Int, from source: String?) throws {
        descriptor = try connectedLoopbackSocket(port: port, from: source) { descriptor in
            var timeout = timeval(tv_sec: 0, tv_usec: 100_000)
            setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        }
    }

    deinit { close(descriptor) }

    /// Sends `bytes`; false once the server has closed the connection.
    @discardableResult
    func send(_ bytes: [UInt8]) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let sent = bytes[offset...].withUnsafeBytes { Glibc.send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL | MSG_DONTWAIT)) }
            if sent < 0, errno == EAGAIN { return true }
            guard sent > 0 else { return false }
            offset += sent
        }
        return true
    }

    /// Everything the server sends until it closes the connection (or sends `marker`); nil if
    /// `limit` passes first. `trickle` is sent every 100 ms meanwhile (a slowloris).
    func readUntilClosed(within limit: Duration, trickle: [UInt8]? = nil, orContaining marker: String? = nil) async -> String? {
        await offThePool {
            let deadline = ContinuousClock.now + limit
            var received: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 65536)
            while ContinuousClock.now < deadline {
                let count = recv(self.descriptor, &buffer, buffer.count, 0)
                if count == 0 { return String(decoding: received, as: UTF8.self) }
                if count > 0 {
                    received += buffer[..<count]
                    if let marker, String(decoding: received, as: UTF8.self).contains(marker) { return String(decoding: received, as: UTF8.self) }
                } else if errno == ECONNRESET {
                    return String(decoding: received, as: UTF8.self)
                } else if let trickle, !self.send(trickle) {
                    return String(decoding: received, as: UTF8.self)
                }
            }
            return nil
        }
    }
}

/// A blocking TCP socket connected to 127.0.0.1:`port` (from `source` when given),
/// `configure`d before it connects.
func connectedLoopbackSocket(port: Int, from source: String? = nil, configure: (Int32) -> Void) throws -> Int32 {
    let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard descriptor >= 0 else { throw TestFailure("socket() failed") }
    configure(descriptor)
    if let source {
        var local = sockaddr_in()
        local.sin_family = sa_family_t(AF_INET)
        local.sin_addr.s_addr = inet_addr(source)
        let bound = withUnsafePointer(to: &local) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0 else {
            close(descriptor)
            throw TestFailure("bind(\(source)) failed")
        }
    }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = in_port_t(UInt16(port).bigEndian)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    let connected = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    guard connected == 0 else {
        close(descriptor)
        throw TestFailure("connect() failed")
    }
    return descriptor
}
