import BenchmarkSupport
import Foundation
import JSONDiff

/// Fills a bucket on the server through one WebSocket with many changes per `c` message and a
/// window of unacknowledged changes (seeding time is not part of any measurement).
enum Seeding {
    static func seed(server: BenchServer, token: String, bucket: String, count: Int) async throws {
        let perMessage = 50
        let window = 2_000
        let frames = (0..<(count + perMessage - 1) / perMessage).map { message in
            let changes = (message * perMessage..<min(count, (message + 1) * perMessage)).map { index in
                let change: JSONObject = [
                    "clientid": .string("seeder"), "id": .string(Documents.key(index)), "o": .string("M"),
                    "v": .object(Documents.creatingDiff(Documents.object(index))),
                    "ccid": .string(ccid(index)),
                ]
                return JSONValue.object(change).compactRendered()
            }
            return "0:c:[" + changes.joined(separator: ",") + "]"
        }
        let pump = Pump(frames: frames, perMessage: perMessage, window: window, total: count)
        let socket = try await BenchSocket.connect(port: server.port) { text in pump.received(text) }
        pump.attach(socket)
        socket.send(
            #"0:init:{"clientid":"seeder","api":1.1,"token":"\#(token)","app_id":"\#(benchAppID)","name":"\#(bucket)","library":"bench","version":"1"}"#
        )
        try await pump.done.wait(limit: .seconds(600))
        await socket.close()
        if let failure = pump.failure { throw BenchFailure("seeding failed: \(failure)") }
    }

    static func ccid(_ index: Int) -> String {
        let text = String(index, radix: 16)
        return String(repeating: "0", count: 32 - text.count) + text
    }

    /// Sends frames while fewer than `window` changes are unacknowledged.
    final class Pump: @unchecked Sendable {
        private let lock = NSLock()
        private let frames: [String]
        private let perMessage: Int
        private let window: Int
        private var next = 0
        private var acknowledged = 0
        private var socket: BenchSocket?
        private(set) var failure: String?
        let done: Countdown

        init(frames: [String], perMessage: Int, window: Int, total: Int) {
            self.frames = frames
            self.perMessage = perMessage
            self.window = window
            self.done = Countdown(total)
        }

        func attach(_ socket: BenchSocket) { lock.withLock { self.socket = socket } }

        func received(_ text: String) {
            if text.hasPrefix("0:auth:") {
                if text.hasPrefix("0:auth:{") { fail(text) } else { sendMore() }
            } else if text.hasPrefix("0:c:") {
                if text.contains("\"error\"") { fail(text) }
                let acks = text.components(separatedBy: "\"ccids\"").count - 1
                lock.withLock { acknowledged += acks }
                done.tick(acks)
                sendMore()
            }
        }

        private func fail(_ text: String) {
            lock.withLock { if failure == nil { failure = String(text.prefix(300)) } }
            done.tick(Int.max / 4)
        }

        private func sendMore() {
            let (socket, batch): (BenchSocket?, [String]) = lock.withLock {
                var batch: [String] = []
                while next < frames.count, next * perMessage - acknowledged < window {
                    batch.append(frames[next])
                    next += 1
                }
                return (self.socket, batch)
            }
            for frame in batch { socket?.send(frame) }
        }
    }
}
