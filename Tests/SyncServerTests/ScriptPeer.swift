import ChildProcesses
import Foundation
import JSONDiff
import NIOConcurrencyHelpers

/// An independent peer written in Python (`Tests/Peers/*.py`) as a child process: one JSON
/// command per line in, one JSON answer per line out. The script ends itself after `lifetime`
/// seconds (SIGALRM) if the test does not close it, and `close()` kills it whatever state it is in.
final class ScriptPeer: Sendable {
    static func script(_ name: String) -> String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Peers/\(name)").path
    }

    private let process: ChildProcess
    private let input: FileHandle
    private let lines = Lines()
    private let name: String

    init(script: String, lifetime: Int) throws {
        name = URL(fileURLWithPath: script).lastPathComponent
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", script, String(lifetime)]
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
        // Throws rather than traps when the script has ended (a closed pipe).
        try input.write(contentsOf: Data((JSONValue.object(command).compactRendered() + "\n").utf8))
        guard let line = await lines.next(timeout: timeout) else { throw TestFailure("\(name) did not answer \(command) in \(timeout)") }
        let answer = try JSONValue(parsing: line)
        if case .string(let error)? = answer["error"] { throw TestFailure("\(name): \(error)") }
        return answer
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
