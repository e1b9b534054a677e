import Foundation
import JSONDiff
import NIOConcurrencyHelpers

/// The independent Telepat client (`Tests/Peers/telepat_peer.py`: python-socketio 4 with
/// python-engineio 3, and requests) as a child process: one JSON command per line in, one JSON
/// answer per line out. The script ends itself after `lifetime` seconds (SIGALRM) if the test
/// does not close it, and `close()` kills it whatever state it is in.
final class TelepatPeer: Sendable {
    static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Peers/telepat_peer.py").path

    private let process: Process
    private let input: FileHandle
    private let lines = Lines()
    let port: Int

    init(port: Int, lifetime: Int = 110) throws {
        self.port = port
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", Self.script, String(lifetime)]
        let stdin = Pipe()
        let stdout = Pipe()
        process.standardInput = stdin
        process.standardOutput = stdout
        let lines = self.lines
        let buffer = NIOLockedValueBox<[UInt8]>([])
        stdout.fileHandleForReading.readabilityHandler = { handle in
            let data = handle.availableData
            if data.isEmpty {
                handle.readabilityHandler = nil
                lines.finish()
                return
            }
            let complete: [String] = buffer.withLockedValue { buffer in
                buffer.append(contentsOf: data)
                var result: [String] = []
                while let newline = buffer.firstIndex(of: 0x0A) {
                    result.append(String(decoding: buffer[..<newline], as: UTF8.self))
                    buffer.removeSubrange(...newline)
                }
                return result
            }
            for line in complete { lines.push(line) }
        }
        try process.run()
        self.process = process
        self.input = stdin.fileHandleForWriting
    }

    /// Sends one command and waits (bounded) for its answer; an `error` answer throws.
    func send(_ command: JSONObject, timeout: Duration = .seconds(30)) async throws -> JSONValue {
        input.write(Data((JSONValue.object(command).compactRendered() + "\n").utf8))
        guard let line = await lines.next(timeout: timeout) else { throw TestFailure("the Telepat peer did not answer \(command) in \(timeout)") }
        let answer = try JSONValue(parsing: line)
        if case .string(let error)? = answer["error"] { throw TestFailure("Telepat peer: \(error)") }
        return answer
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

    /// Connects the socket, binds the device and waits for `ready`.
    func connect(device: String, application: String) async throws {
        _ = try await send([
            "op": "connect", "port": .integer(Int64(port)), "device_id": .string(device), "application_id": .string(application),
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
        _ = try? await send(["op": "close"], timeout: .seconds(5))
        if process.isRunning { process.terminate() }
        try? input.close()
    }

    deinit {
        if process.isRunning { process.terminate() }
    }
}

/// Lines of the peer's output, handed to one waiting reader at a time.
private final class Lines: Sendable {
    private struct State {
        var lines: [String] = []
        var waiter: CheckedContinuation<String?, Never>?
        var finished = false
    }

    private let state = NIOLockedValueBox(State())

    func push(_ line: String) {
        let waiter = state.withLockedValue { state -> CheckedContinuation<String?, Never>? in
            guard let waiter = state.waiter else {
                state.lines.append(line)
                return nil
            }
            state.waiter = nil
            return waiter
        }
        waiter?.resume(returning: line)
    }

    func finish() {
        let waiter = state.withLockedValue { state in
            state.finished = true
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume(returning: nil)
    }

    /// The next line, or nil when none comes in time or the output ended.
    func next(timeout: Duration) async -> String? {
        let timer = Task { [state] in
            // Cancelled: the line came in time (the waiter now may be the next call's).
            guard (try? await Task.sleep(for: timeout)) != nil else { return }
            let waiter = state.withLockedValue { state in
                defer { state.waiter = nil }
                return state.waiter
            }
            waiter?.resume(returning: nil)
        }
        defer { timer.cancel() }
        return await withCheckedContinuation { continuation in
            let immediate: String?? = state.withLockedValue { state in
                if !state.lines.isEmpty { return .some(state.lines.removeFirst()) }
                if state.finished { return .some(nil) }
                state.waiter = continuation
                return nil
            }
            if let immediate { continuation.resume(returning: immediate) }
        }
    }
}
