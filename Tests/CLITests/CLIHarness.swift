import BucketFS
import ChildProcesses
import Foundation
import Testing

/// The command-line tests' bounds, in one place. Each is a hang guard sized for a machine
/// several times slower than a quiet one (other builds running beside the tests, load average
/// 10 and up on 2 cores), never a claim about speed: a passing test waits only as long as what
/// it waits for takes, so raising these costs nothing until something hangs.
enum Patience {
    /// A wait for something that must happen, and a `bucketfs` command's run.
    static let seconds: Double = 300
    /// Each test's limit (Swift Testing counts whole minutes).
    static let testMinutes = 15
}

/// Runs the real `bucketfs` binary (built beside this test bundle) in temp XDG directories, and
/// cleans up every mount and process it started, even when a test fails.
final class CLIHarness: @unchecked Sendable {
    let root: URL
    private var background: [ChildProcess] = []
    private var mountpoints: [String] = []
    /// Set for every command run after (e.g. a small feed size for the mounts).
    var extraEnvironment: [String: String] = [:]

    static var binary: String {
        // The test bundle sits in the build products directory, next to the `bucketfs` executable.
        let products = Bundle.main.bundleURL.deletingLastPathComponent()
        for candidate in [products, Bundle.main.bundleURL, URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()] {
            let path = candidate.appendingPathComponent("bucketfs").path
            if FileManager.default.isExecutableFile(atPath: path) { return path }
        }
        let fallback = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent(".build/debug/bucketfs").path
        return fallback
    }

    init() throws {
        root = FileManager.default.temporaryDirectory.appendingPathComponent("bucketfs-test-cli-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        #expect(FileManager.default.isExecutableFile(atPath: Self.binary), "bucketfs binary not found at \(Self.binary): run swift build first")
    }

    deinit {
        for mountpoint in mountpoints where isMounted(mountpoint) {
            _ = try? run(["/usr/bin/env", "fusermount3", "-u", mountpoint], timeout: 10)
            if isMounted(mountpoint) { _ = try? run(["/usr/bin/env", "fusermount3", "-uz", mountpoint], timeout: 10) }
        }
        for process in background where process.isRunning {
            kill(process.processIdentifier, SIGKILL)
        }
        try? FileManager.default.removeItem(at: root)
    }

    var environment: [String: String] {
        var environment = ProcessInfo.processInfo.environment
        environment["XDG_DATA_HOME"] = root.appendingPathComponent("data").path
        environment["XDG_STATE_HOME"] = root.appendingPathComponent("state").path
        environment["XDG_CONFIG_HOME"] = root.appendingPathComponent("config").path
        environment.merge(extraEnvironment) { $1 }
        return environment
    }

    func path(_ name: String) -> String { root.appendingPathComponent(name).path }

    func directory(_ name: String) throws -> String {
        let path = path(name)
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    struct Output {
        var status: Int32
        var stdout: String
        var stderr: String
    }

    /// Runs `bucketfs ARGS` to completion (killed after `timeout` seconds).
    @discardableResult
    func bucketfs(_ arguments: [String], stdin: String? = nil, timeout: Double = Patience.seconds) throws -> Output {
        if arguments.first == "mount", let index = arguments.firstIndex(where: { !$0.hasPrefix("-") && $0 != "mount" }) {
            mountpoints.append(arguments[index])
        }
        return try run([Self.binary] + arguments, stdin: stdin, timeout: timeout)
    }

    func run(_ command: [String], stdin: String? = nil, timeout: Double) throws -> Output {
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: command[0])
        process.arguments = Array(command.dropFirst())
        process.environment = environment
        let out = root.appendingPathComponent("out-\(UUID().uuidString)")
        let err = root.appendingPathComponent("err-\(UUID().uuidString)")
        FileManager.default.createFile(atPath: out.path, contents: nil)
        FileManager.default.createFile(atPath: err.path, contents: nil)
        process.standardOutput = try FileHandle(forWritingTo: out)
        process.standardError = try FileHandle(forWritingTo: err)
        let input = Pipe()
        process.standardInput = input
        try process.run()
        if let stdin { input.fileHandleForWriting.write(Data(stdin.utf8)) }
        try? input.fileHandleForWriting.close()
        let deadline = Date().addingTimeInterval(timeout)
        while process.isRunning && Date() < deadline { Thread.sleep(forTimeInterval: 0.02) }
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
            Issue.record("\(command.joined(separator: " ")) did not finish within \(timeout) s")
        }
        process.waitUntilExit()
        return Output(
            status: process.terminationStatus,
            stdout: text(of: out),
            stderr: text(of: err))
    }

    /// Starts `bucketfs ARGS` in the background; its output goes to the returned file.
    func start(_ arguments: [String]) throws -> (ChildProcess, URL) {
        try startProcess([Self.binary] + arguments)
    }

    /// Starts any command in the background (killed at the end of the test if still running).
    func startProcess(_ command: [String]) throws -> (ChildProcess, URL) {
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: command[0])
        process.arguments = Array(command.dropFirst())
        process.environment = environment
        let out = root.appendingPathComponent("bg-\(UUID().uuidString)")
        FileManager.default.createFile(atPath: out.path, contents: nil)
        let handle = try FileHandle(forWritingTo: out)
        process.standardOutput = handle
        process.standardError = handle
        process.standardInput = FileHandle.nullDevice
        try process.run()
        background.append(process)
        return (process, out)
    }

    /// A `bucketfs serve` on a free loopback port (with `options`); returns the process and the port.
    func startServer(data: String, port: Int = 0, options: [String] = []) throws -> (ChildProcess, Int) {
        let (process, output) = try start(["serve", "--data", data, "--port", String(port), "--host", "127.0.0.1"] + options)
        var found: Int?
        try eventually {
            let printed = text(of: output)
            if let range = printed.range(of: #"127\.0\.0\.1:(\d+)"#, options: .regularExpression) {
                found = Int(printed[range].split(separator: ":").last ?? "")
            }
            return found != nil
        }
        return (process, try #require(found))
    }

    /// A `bucketfs serve` with one user (alice@example.com); returns it, its port and a token.
    func serverWithUser(data: String) throws -> (ChildProcess, Int, String) {
        let token = try bucketfs(["user", "add", "--data", data, "alice@example.com"], stdin: "secret-password\n")
        #expect(token.status == 0, "user add failed: \(token.stderr)")
        let (server, port) = try startServer(data: data)
        return (server, port, token.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
    }

    /// `bucketfs mount` of `buckets` from the server on `port`, in the background; expects success.
    func mount(
        _ mountpoint: String, port: Int, token: String, buckets: [String] = ["notes"], store: String? = nil,
        options: [String] = []
    ) throws {
        var arguments = ["mount", mountpoint, "--server", "ws://localhost:\(port)", "--app-id", "test-app", "--token", token]
        for bucket in buckets { arguments += ["--bucket", bucket] }
        if let store { arguments += ["--store", store] }
        arguments += options
        let result = try bucketfs(arguments)
        #expect(result.status == 0, "mount failed: \(result.stderr)")
        #expect(result.stdout.contains("mounted at \(mountpoint)"))
    }

    func stop(_ process: ChildProcess) {
        guard process.isRunning else { return }
        kill(process.processIdentifier, SIGTERM)
        let deadline = Date().addingTimeInterval(20)
        while process.isRunning && Date() < deadline { Thread.sleep(forTimeInterval: 0.02) }
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
    }
}

/// What a file holds so far (a started command's output), as text; empty if it cannot be read.
func text(of file: URL) -> String {
    (try? String(contentsOf: file, encoding: .utf8)) ?? ""
}

/// Polls `condition` until it holds; fails the test (does not hang) after `timeout` seconds.
func eventually(timeout: Double = Patience.seconds, _ condition: () throws -> Bool) throws {
    let deadline = Date().addingTimeInterval(timeout)
    while Date() < deadline {
        if try condition() { return }
        Thread.sleep(forTimeInterval: 0.05)
    }
    Issue.record("condition not met within \(timeout) s")
    throw CancellationError()
}

func isMounted(_ path: String) -> Bool {
    let table = ProcFile.text("/proc/self/mounts") ?? ""
    return table.split(separator: "\n").contains { $0.split(separator: " ").dropFirst().first.map(String.init) == path }
}
