import Foundation
import JSONDiff
import NIOConcurrencyHelpers

/// The independent Telepat client (`Tests/Peers/telepat_peer.py`: python-socketio 4 with
/// python-engineio 3, and requests), a `ScriptPeer`.
final class TelepatPeer: Sendable {
    private let peer: ScriptPeer
    let port: Int

    init(port: Int, lifetime: Int = 110) throws {
        self.port = port
        peer = try ScriptPeer(script: ScriptPeer.script("telepat_peer.py"), lifetime: lifetime)
    }

    /// Sends one command and waits (bounded) for its answer; an `error` answer throws.
    func send(_ command: JSONObject, timeout: Duration = .seconds(30)) async throws -> JSONValue {
        try await peer.send(command, timeout: timeout)
    }

    /// An HTTP request; answers (status, body).
    func http(_ method: String, _ path: String, headers: [String: String], body: JSONValue?) async throws -> (Int, JSONValue) {
        var command: JSONObject = [
            "op": .string("http"), "method": .string(method), "path": .string(path), "port": .integer(Int64(port)),
            "headers": .object(JSONObject(uniqueKeysWithValues: headers.map { (JSONKey($0.key), .string($0.value)) })),
        ]
        if let body { command["body"] = body }
        let answer = try await send(command)
        guard case .integer(let status)? = answer["status"] else { throw TestFailure("no status in \(answer)") }
        return (Int(status), answer["body"] ?? .null)
    }

    /// Connects the socket (over `transports`, in the order the client tries them), binds the
    /// device and waits for `ready`. Answers the peer's report: `ready`, `sid` and the
    /// `transport` it ended on, or `refused` with the server's error event.
    @discardableResult
    func connect(device: String, application: String, transports: [String] = ["websocket"]) async throws -> JSONValue {
        try await send([
            "op": "connect", "port": .integer(Int64(port)), "device_id": .string(device), "application_id": .string(application),
            "transports": .array(transports.map { .string($0) }),
        ])
    }

    /// The next `message` event's data, or nil when none comes within `seconds`.
    func nextMessage(seconds: Int = 30) async throws -> JSONValue? {
        let answer = try await send(["op": "next", "timeout": .integer(Int64(seconds))], timeout: .seconds(seconds + 20))
        return answer["message"]
    }

    /// Every `message` event in the next `seconds`.
    func quiet(seconds: Double) async throws -> [JSONValue] {
        try await send(["op": "quiet", "seconds": .double(seconds)], timeout: .seconds(Int64(seconds) + 20))["messages"]?.arrayValue ?? []
    }

    func close() async {
        await peer.close()
    }
}
