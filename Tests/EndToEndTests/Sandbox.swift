import BucketFS
import ChildProcesses
import Foundation
import PostgresTestSupport
import Testing

/// The end-to-end tests' bounds, in one place. Each is a hang guard sized for a machine several
/// times slower than a quiet one (other builds running beside the tests, load average 10 and up
/// on 2 cores), never a claim about speed: a passing test waits only as long as what it waits
/// for takes, so raising these costs nothing until something hangs.
enum Patience {
    /// A wait for something that must happen (a mount up, a save arrived, a process ended), and
    /// a tool's run (a tool stuck on a mount is killed after it).
    static let seconds: Double = 300
    /// A test's watchdog (`Sandbox`): past it, its processes are killed and its mounts detached.
    static let sandboxSeconds: Double = 900
    /// Each test's limit (Swift Testing counts whole minutes): above the watchdog, so the
    /// watchdog's clean-up comes first, with room for what runs before the sandbox (PostgreSQL).
    static let testMinutes = 20
}

/// A temp directory for one test, with its own XDG data and state directories, that owns every
/// process and mount the test starts. `close()` (call it in a `defer`) unmounts, stops the
/// processes and removes the directory; a watchdog does the same, recording an issue, if the test
/// overruns its limit, so a stuck mount fails the test instead of hanging the suite.
final class Sandbox: @unchecked Sendable {
    let root: String
    let binary: String
    private let lock = NSLock()
    private var processes: [Background] = []
    private var mountPoints: [String] = []
    /// Processes that are not our children (a daemonized mount): stopped by pid.
    private var adopted: [Int32] = []
    private var closed = false
    private var deadlineItem: DispatchWorkItem?

    init(timeLimit: Double = Patience.sandboxSeconds) throws {
        binary = try Binary.path()
        // `bucketfs-test` in the name: scripts/test clears mounts left under such paths by a crash.
        // Short, so a mount's control socket (state/bucketfs/sockets/...) fits a Unix socket
        // address (107 bytes): `bucketfs sync` asks the mount through it whether it is in sync.
        root = FileManager.default.temporaryDirectory.appendingPathComponent("bucketfs-test-e2e-\(UUID().uuidString.prefix(8))").path
        for sub in ["data", "state"] {
            try FileManager.default.createDirectory(atPath: root + "/" + sub, withIntermediateDirectories: true)
        }
        let deadline = DispatchWorkItem { [weak self] in
            guard let self, !self.isClosed else { return }
            Issue.record("end-to-end test exceeded \(timeLimit) s: killing its processes and detaching its mounts")
            self.forceStop()
        }
        DispatchQueue.global().asyncAfter(deadline: .now() + timeLimit, execute: deadline)
        deadlineItem = deadline
    }

    private var isClosed: Bool { lock.withLock { closed } }

    /// The environment for every bucketfs process: XDG directories inside the sandbox.
    var environment: [String: String] {
        var environment = ProcessInfo.processInfo.environment
        environment["XDG_DATA_HOME"] = root + "/data"
        environment["XDG_STATE_HOME"] = root + "/state"
        // And config: a mount reads config.json, which the user (or another run) may have
        // written in a form this build does not read, and a login must not write the user's.
        environment["XDG_CONFIG_HOME"] = root + "/config"
        return environment
    }

    /// A new empty directory inside the sandbox.
    func directory(_ name: String) throws -> String {
        let path = root + "/" + name
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    /// Runs `bucketfs ARGS...` to completion.
    func bucketfs(_ arguments: [String], input: String? = nil, timeout: Double = Patience.seconds) throws -> Command.Output {
        try Command.run(binary, arguments, environment: environment, input: input, timeout: timeout)
    }

    /// Starts `bucketfs ARGS...` in the background, output to `log`; stopped by `close()`: a
    /// mount process (`endsOnUnmount`) is given time to finish after its unmount, others get SIGTERM.
    /// `extraEnvironment`: variables this process has besides `environment`.
    func start(
        _ arguments: [String], log: String, endsOnUnmount: Bool = false, extraEnvironment: [String: String] = [:]
    ) throws -> Background {
        let process = try Background(
            executable: binary, arguments: arguments, environment: environment.merging(extraEnvironment) { $1 }, log: root + "/" + log,
            endsOnUnmount: endsOnUnmount)
        lock.withLock { processes.append(process) }
        return process
    }

    /// Remembers a mount point so `close()` unmounts it whatever happens.
    func track(mountPoint: String) {
        lock.withLock { if !mountPoints.contains(mountPoint) { mountPoints.append(mountPoint) } }
    }

    /// Makes `close()` stop `pid` (a daemon started by a command) if it is still running.
    func adopt(pid: Int32) {
        lock.withLock { adopted.append(pid) }
    }

    /// Unmounts everything (`fusermount3 -u`, then `-uz`), stops the processes (SIGTERM, then
    /// SIGKILL), and removes the directory.
    func close() {
        let (points, children, others) = lock.withLock { () -> ([String], [Background], [Int32]) in
            closed = true
            return (mountPoints, processes, adopted)
        }
        deadlineItem?.cancel()
        for point in points where Mounts.isMounted(point) {
            if (try? Command.run("/usr/bin/fusermount3", ["-u", point], timeout: 30))?.status != 0 {
                _ = try? Command.run("/usr/bin/fusermount3", ["-uz", point], timeout: 30)
            }
        }
        // Mount processes first (they may still be sending to the server), then the rest.
        for child in children.filter(\.endsOnUnmount) + children.filter({ !$0.endsOnUnmount }) where child.isRunning {
            if !child.endsOnUnmount || !child.waitForExit(timeout: 30) {
                child.signal(SIGTERM)
                if !child.waitForExit(timeout: 10) {
                    child.signal(SIGKILL)
                    _ = child.waitForExit(timeout: 10)
                }
            }
        }
        for pid in others where !eventually(20, { kill(pid, 0) != 0 }) {
            kill(pid, SIGKILL)
        }
        for point in points where Mounts.isMounted(point) {
            _ = try? Command.run("/usr/bin/fusermount3", ["-uz", point], timeout: 30)
        }
        // BUCKETFS_TEST_KEEP=1: the logs and stores stay, to read after a failure.
        if ProcessInfo.processInfo.environment["BUCKETFS_TEST_KEEP"] == "1" {
            print("kept \(root)")
        } else if !points.contains(where: Mounts.isMounted) {
            try? FileManager.default.removeItem(atPath: root)
        }
    }

    /// The watchdog's way out: kill everything at once, then detach the mounts.
    private func forceStop() {
        let (points, children, others) = lock.withLock { (mountPoints, processes, adopted) }
        for child in children { child.signal(SIGKILL) }
        for pid in others { kill(pid, SIGKILL) }
        for point in points {
            _ = try? Command.run("/usr/bin/fusermount3", ["-uz", point], timeout: 30)
        }
    }
}

/// A long-running child process whose output goes to a log file.
final class Background: @unchecked Sendable {
    let process = ChildProcess()
    let logPath: String
    let endsOnUnmount: Bool

    init(executable: String, arguments: [String], environment: [String: String], log: String, endsOnUnmount: Bool) throws {
        logPath = log
        self.endsOnUnmount = endsOnUnmount
        _ = FileManager.default.createFile(atPath: log, contents: nil)
        guard let handle = FileHandle(forWritingAtPath: log) else { throw SandboxError("cannot write \(log)") }
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.environment = environment
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = handle
        process.standardError = handle
        try process.run()
        try? handle.close()
    }

    var pid: Int32 { process.processIdentifier }
    var isRunning: Bool { process.isRunning }

    func signal(_ number: Int32) {
        if process.isRunning { kill(process.processIdentifier, number) }
    }

    /// Waits up to `timeout` seconds for the process to end; whether it ended.
    func waitForExit(timeout: Double = Patience.seconds) -> Bool {
        let deadline = Date(timeIntervalSinceNow: timeout)
        while process.isRunning {
            if Date() > deadline { return false }
            Thread.sleep(forTimeInterval: 0.02)
        }
        return true
    }

    /// The exit status once ended (a signal number for a process killed by a signal).
    var exitStatus: Int32? { process.isRunning ? nil : process.terminationStatus }

    var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    /// The last lines of the log, for failure messages. A crash report is shown from its start
    /// (Swift's "Fatal error" line and the backtracer's "Program crashed" and first frames come
    /// first, and its register dump last: the model test once showed only the registers of a
    /// server that had crashed).
    var logTail: String { Self.tail(of: log) }

    static func tail(of log: String) -> String {
        let lines = log.split(separator: "\n")
        let crashMarks = ["Fatal error", "Program crashed", "Backtracing from"]
        if let crash = lines.firstIndex(where: { line in crashMarks.contains { line.contains($0) } }) {
            return (lines[crash...].prefix(80) + ["..."] + lines.suffix(5) + crashReportsElsewhere).joined(separator: "\n")
        }
        return lines.suffix(15).joined(separator: "\n")
    }

    /// Where the backtracer wrote the report instead of the log, when the run sends reports to
    /// files (`scripts/lib/test-runs.sh`).
    private static var crashReportsElsewhere: [Substring] {
        guard let settings = ProcessInfo.processInfo.environment["SWIFT_BACKTRACE"],
            let directory = settings.split(separator: ",").first(where: { $0.hasPrefix("output-to=") })?.dropFirst("output-to=".count)
        else { return [] }
        return ["(the crash report is a file in \(directory))"]
    }
}

struct SandboxError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

enum Mounts {
    /// Whether `path` is a mount point now (/proc/self/mounts; our temp paths need no unescaping).
    static func isMounted(_ path: String) -> Bool {
        guard let table = ProcFile.text("/proc/self/mounts") else { return false }
        return table.split(separator: "\n").contains { $0.split(separator: " ").dropFirst().first.map(String.init) == path }
    }
}

/// Polls `condition` until it holds or `seconds` pass; only a hang guard, never a speed check.
func eventually(_ seconds: Double = Patience.seconds, _ condition: () throws -> Bool) rethrows -> Bool {
    let deadline = Date(timeIntervalSinceNow: seconds)
    while Date() < deadline {
        if try condition() { return true }
        Thread.sleep(forTimeInterval: 0.05)
    }
    return try condition()
}

/// `eventually` for async tests: the polls (a tool run, a read on a mount) and the sleeps
/// between them run on a thread of their own (`offThePool`), so the test holds no thread of
/// Swift's cooperative pool while it waits, nor needs one back after every try.
func waitUntil(_ seconds: Double = Patience.seconds, _ condition: @escaping () -> Bool) async -> Bool {
    await offThePool { eventually(seconds, condition) }
}
