import Foundation
import PostgresTestSupport
#if canImport(Glibc)
import Glibc
#endif

/// A hand-made WebSocket client over a blocking POSIX socket, for misbehaving on purpose:
/// it can send frames and then never read (the slow-reader case).
///
/// Every blocking call runs on a thread of its own (`open`, `drainUntilClosed`): the server
/// under test lives in this process and needs the cooperative pool, which has one thread per
/// core, to answer. A test blocking a pool thread on a reply can starve the server for as long
/// as the socket timeout when other tests hold the remaining threads.
final class RawWebSocket: @unchecked Sendable {
    private let descriptor: Int32

    /// Connects and completes the WebSocket upgrade.
    static func open(port: Int, path: String, receiveBufferBytes: Int32 = 4096) async throws -> RawWebSocket {
        try await offThePool { try RawWebSocket(port: port, path: path, receiveBufferBytes: receiveBufferBytes) }
    }

    private init(port: Int, path: String, receiveBufferBytes: Int32) throws {
        descriptor = try connectedLoopbackSocket(port: port) { descriptor in
            var size = receiveBufferBytes
            setsockopt(descriptor, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
            var timeout = timeval(tv_sec: 10, tv_usec: 0)
            setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            setsockopt(descriptor, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        }
        let request = "GET \(path) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            + "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        try write(Array(request.utf8))
        // Read the 101 response headers byte by byte so no frame bytes are consumed.
        var header: [UInt8] = []
        while !header.ends(with: Array("\r\n\r\n".utf8)) {
            var byte: UInt8 = 0
            guard recv(descriptor, &byte, 1, 0) == 1 else { throw TestFailure("handshake failed") }
            header.append(byte)
        }
        guard String(decoding: header, as: UTF8.self).hasPrefix("HTTP/1.1 101") else {
            throw TestFailure("upgrade refused: \(String(decoding: header, as: UTF8.self))")
        }
    }

    deinit { close(descriptor) }

    /// Sends one masked text frame.
    func sendText(_ text: String) throws {
        try sendFrame(Array(text.utf8))
    }

    /// Sends one final frame of `opcode` (text by default), masked unless told otherwise.
    func sendFrame(_ payload: [UInt8], opcode: UInt8 = 0x1, masked: Bool = true) throws {
        let maskBit: UInt8 = masked ? 0x80 : 0
        var frame: [UInt8] = [0x80 | opcode]
        if payload.count < 126 {
            frame.append(maskBit | UInt8(payload.count))
        } else if payload.count < 65536 {
            frame.append(maskBit | 126)
            frame += [UInt8(payload.count >> 8), UInt8(payload.count & 0xFF)]
        } else {
            frame.append(maskBit | 127)
            for shift in stride(from: 56, through: 0, by: -8) { frame.append(UInt8((payload.count >> shift) & 0xFF)) }
        }
        guard masked else { return try write(frame + payload) }
        let mask: [UInt8] = [0x12, 0x34, 0x56, 0x78]
        frame += mask
        for (index, byte) in payload.enumerated() { frame.append(byte ^ mask[index % 4]) }
        try write(frame)
    }

    /// Reads the server's (unmasked) frames until a close frame; its status code, or nil if
    /// the connection ends first (or `hangGuard` passes).
    func receiveCloseCode() async -> UInt16? {
        await offThePool {
            let deadline = ContinuousClock.now + hangGuard
            while let (opcode, payload) = self.blockingReceiveFrame(until: deadline) {
                if opcode == 0x8 { return payload.count >= 2 ? UInt16(payload[0]) << 8 | UInt16(payload[1]) : nil }
            }
            return nil
        }
    }

    /// The next text frame's text, skipping other frames; nil if the connection ends first (or
    /// `hangGuard` passes).
    func receiveText() async -> String? {
        await offThePool {
            let deadline = ContinuousClock.now + hangGuard
            while let (opcode, payload) = self.blockingReceiveFrame(until: deadline) {
                if opcode == 0x8 { return nil }
                if opcode == 0x1 { return String(decoding: payload, as: UTF8.self) }
            }
            return nil
        }
    }

    /// One whole frame (its opcode and payload); nil once the connection ends or `deadline`
    /// passes (the socket's 10 s receive timeout only paces the wait).
    private func blockingReceiveFrame(until deadline: ContinuousClock.Instant) -> (opcode: UInt8, payload: [UInt8])? {
        func read(_ count: Int) -> [UInt8]? {
            var bytes = [UInt8](repeating: 0, count: count)
            var offset = 0
            while offset < count {
                let got = bytes[offset...].withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, count - offset, 0) }
                if got < 0, errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR, ContinuousClock.now < deadline { continue }
                guard got > 0 else { return nil }
                offset += got
            }
            return bytes
        }
        guard let head = read(2) else { return nil }
        var length = Int(head[1] & 0x7F)
        if length == 126 { guard let extended = read(2) else { return nil }; length = Int(extended[0]) << 8 | Int(extended[1]) }
        if length == 127 { guard let extended = read(8) else { return nil }; length = extended.reduce(0) { $0 << 8 | Int($1) } }
        guard let payload = read(length) else { return nil }
        return (head[0] & 0x0F, payload)
    }

    /// Reads until the server closes the connection; true on EOF/reset, false when `limit`
    /// passes first (a hang guard: the socket's 10 s receive timeout only paces the loop).
    func drainUntilClosed(within limit: Duration) async -> Bool {
        await offThePool { self.blockingDrainUntilClosed(within: limit) }
    }

    private func blockingDrainUntilClosed(within limit: Duration) -> Bool {
        let deadline = ContinuousClock.now + limit
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = recv(descriptor, &buffer, buffer.count, 0)
            if count == 0 { return true }
            if count < 0 {
                if errno == ECONNRESET { return true }
                guard errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR, ContinuousClock.now < deadline else { return false }
            }
        }
    }

    private func write(_ bytes: [UInt8]) throws {
        var offset = 0
        while offset < bytes.count {
            let sent = bytes[offset...].withUnsafeBytes { send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard sent > 0 else { throw TestFailure("send() failed") }
            offset += sent
        }
    }
}

extension Array where Element: Equatable {
    fileprivate func ends(with suffix: [Element]) -> Bool {
        count >= suffix.count && Array(self[(count - suffix.count)...]) == suffix
    }
}
