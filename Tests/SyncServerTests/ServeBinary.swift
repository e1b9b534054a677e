import ChildProcesses
import Foundation
import Testing

/// A `bucketfs serve` process (the binary built beside this test bundle), for what only a real
/// process shows: descriptor limits, signals. Killed on `stop()` if still running.
final class ServeBinary: @unchecked Sendable {
    let process = ChildProcess()
    let logPath: String
    private(set) var port = 0

    static var binary: String {
        let products = Bundle.main.bundleURL.deletingLastPathComponent()
        for candidate in [products, Bundle.main.bundleURL, URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()] {
            let path = candidate.appendingPathComponent("bucketfs").path
            if FileManager.default.isExecutableFile(atPath: path) { return path }
        }
        return URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent(".build/debug/bucketfs").path
    }

    /// Starts `serve` on a free port over `data`, under `prefix` (e.g. `prlimit --nofile=256:256`);
    /// with `database`, over that PostgreSQL database (`data` then holds only the log).
    init(data: String, database: String? = nil, prefix: [String] = [], extraArguments: [String] = []) async throws {
        logPath = data + "/serve.log"
        FileManager.default.createFile(atPath: logPath, contents: nil)
        let logHandle = try FileHandle(forWritingTo: URL(fileURLWithPath: logPath))
        let store = database.map { ["--database", $0] } ?? ["--data", data]
        let command = prefix + [Self.binary, "serve"] + store + ["--port", "0", "--host", "127.0.0.1"] + extraArguments
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = command
        process.standardOutput = logHandle
        process.standardError = logHandle
        try process.run()
        let deadline = ContinuousClock.now + hangGuard
        while ContinuousClock.now < deadline, process.isRunning {
            if let found = Self.port(in: self.log()) {
                port = found
                return
            }
            try await Task.sleep(for: .milliseconds(20))
        }
        stop()
        throw TestFailure("serve did not start: \(self.log())")
    }

    /// Everything the process has written.
    func log() -> String {
        (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? ""
    }

    private static func port(in log: String) -> Int? {
        guard let range = log.range(of: "listening on ws://127.0.0.1:") else { return nil }
        return Int(log[range.upperBound...].prefix { $0.isNumber })
    }

    /// The port of `/metrics` (started with `--metrics-port`), once the process has said it.
    func metricsPort() async throws -> Int {
        let deadline = ContinuousClock.now + hangGuard
        while ContinuousClock.now < deadline, process.isRunning {
            let log = self.log()
            if let range = log.range(of: "metrics on http://127.0.0.1:"), let port = Int(log[range.upperBound...].prefix { $0.isNumber }) {
                return port
            }
            try await Task.sleep(for: .milliseconds(20))
        }
        throw TestFailure("serve did not say its metrics port: \(self.log())")
    }

    /// Sends `signal` and waits (bounded) for the exit; how long it took, nil if it did not exit.
    func signal(_ signal: Int32, within limit: Duration) async -> Duration? {
        let start = ContinuousClock.now
        kill(process.processIdentifier, signal)
        while process.isRunning {
            if ContinuousClock.now - start > limit { return nil }
            try? await Task.sleep(for: .milliseconds(20))
        }
        return ContinuousClock.now - start
    }

    func stop() {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
    }
}
