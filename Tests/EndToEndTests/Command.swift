import ChildProcesses
import Foundation
import Testing

/// Runs a tool to completion with a deadline: a tool stuck on a mount is killed, never waited on
/// forever.
enum Command {
    struct Output: Sendable {
        let status: Int32
        let stdout: String
        let stderr: String
    }

    struct TimedOut: Error, CustomStringConvertible {
        let command: String
        let seconds: Double
        var description: String { "timed out after \(seconds) s: \(command)" }
    }

    static func run(
        _ executable: String, _ arguments: [String], directory: String? = nil, environment: [String: String]? = nil,
        input: String? = nil, timeout: Double = Patience.seconds
    ) throws -> Output {
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        if let directory { process.currentDirectoryURL = URL(fileURLWithPath: directory) }
        if let environment { process.environment = environment }
        let stdout = Pipe()
        let stderr = Pipe()
        let stdin = Pipe()
        process.standardOutput = stdout
        process.standardError = stderr
        process.standardInput = input == nil ? FileHandle.nullDevice : stdin
        let done = DispatchSemaphore(value: 0)
        process.terminationHandler = { _ in done.signal() }
        try process.run()
        let outputs = OutputCollector(stdout: stdout, stderr: stderr)
        if let input {
            try? stdin.fileHandleForWriting.write(contentsOf: Data(input.utf8))
            try? stdin.fileHandleForWriting.close()
        }
        if done.wait(timeout: .now() + timeout) == .timedOut {
            kill(process.processIdentifier, SIGKILL)
            _ = done.wait(timeout: .now() + 10)
            throw TimedOut(command: ([executable] + arguments).joined(separator: " "), seconds: timeout)
        }
        let (out, err) = outputs.finish()
        return Output(status: process.terminationStatus, stdout: out, stderr: err)
    }

    /// `sh -c script` in `directory`; records an issue with stderr when the status is not 0.
    @discardableResult
    static func shell(
        _ script: String, in directory: String, timeout: Double = Patience.seconds, expectSuccess: Bool = true,
        sourceLocation: SourceLocation = #_sourceLocation
    ) throws -> Output {
        let output = try run("/bin/sh", ["-c", script], directory: directory, timeout: timeout)
        if expectSuccess {
            #expect(output.status == 0, "`\(script)` failed: \(output.stderr)", sourceLocation: sourceLocation)
        }
        return output
    }

    /// `python3 -c code ARGS...` in `directory`; records an issue when it fails.
    @discardableResult
    static func python(
        _ code: String, _ arguments: [String] = [], in directory: String, timeout: Double = Patience.seconds,
        sourceLocation: SourceLocation = #_sourceLocation
    ) throws -> Output {
        let output = try run("/usr/bin/env", ["python3", "-c", code] + arguments, directory: directory, timeout: timeout)
        #expect(output.status == 0, "python failed: \(output.stderr)", sourceLocation: sourceLocation)
        return output
    }
}

/// Reads both pipes on threads of their own while the process runs, so a full pipe never blocks it.
private final class OutputCollector: @unchecked Sendable {
    private let lock = NSLock()
    private var out = Data()
    private var err = Data()
    private let group = DispatchGroup()

    init(stdout: Pipe, stderr: Pipe) {
        for (pipe, isOut) in [(stdout, true), (stderr, false)] {
            group.enter()
            Thread.detachNewThread { [self] in
                let data = pipe.fileHandleForReading.readDataToEndOfFile()
                lock.withLock { if isOut { out = data } else { err = data } }
                group.leave()
            }
        }
    }

    func finish() -> (String, String) {
        _ = group.wait(timeout: .now() + 10)
        return lock.withLock { (String(decoding: out, as: UTF8.self), String(decoding: err, as: UTF8.self)) }
    }
}
