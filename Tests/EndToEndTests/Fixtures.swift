import Foundation
import Testing

/// `bucketfs serve` on 127.0.0.1, port 0, data in the sandbox; one user made with `bucketfs user add`.
struct ServerProcess {
    static let appID = "e2e-app"
    let process: Background
    let port: Int
    let dataDirectory: String
    let username: String
    /// The token printed by `bucketfs user add`.
    let token: String

    var url: String { "ws://127.0.0.1:\(port)" }

    static func start(in sandbox: Sandbox, username: String = "alice@example.com") throws -> ServerProcess {
        let data = try sandbox.directory("server")
        let added = try sandbox.bucketfs(["user", "add", "--data", data, username], input: "correct horse battery\n")
        guard added.status == 0, let token = added.stdout.split(separator: "\n").last.map(String.init), !token.isEmpty else {
            throw SandboxError("bucketfs user add failed (\(added.status)): \(added.stderr)")
        }
        let process = try sandbox.start(["serve", "--data", data, "--port", "0"], log: "server.log")
        var port: Int?
        _ = eventually {
            port = Self.port(in: process.log)
            return port != nil || !process.isRunning
        }
        guard let port else {
            throw SandboxError("bucketfs serve printed no port (running: \(process.isRunning)):\n\(process.logTail)")
        }
        return ServerProcess(process: process, port: port, dataDirectory: data, username: username, token: token)
    }

    /// Another access token for the user (`bucketfs user token`).
    func newToken(in sandbox: Sandbox) throws -> String {
        let issued = try sandbox.bucketfs(["user", "token", "--data", dataDirectory, username])
        let token = issued.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        guard issued.status == 0, !token.isEmpty else { throw SandboxError("bucketfs user token failed: \(issued.stderr)") }
        return token
    }

    /// The port from the startup line `... listening on ws://HOST:PORT/sock/...`.
    static func port(in log: String) -> Int? {
        for line in log.split(separator: "\n") where line.contains("listening on") {
            guard let range = line.range(of: "://") else { continue }
            let rest = line[range.upperBound...]
            guard let colon = rest.firstIndex(of: ":") else { continue }
            let digits = rest[rest.index(after: colon)...].prefix(while: \.isNumber)
            if let port = Int(digits), port > 0 { return port }
        }
        return nil
    }
}

/// `bucketfs mount DIR --foreground ...` as a child process of the test.
final class MountProcess: @unchecked Sendable {
    let sandbox: Sandbox
    let mountPoint: String
    private(set) var arguments: [String]
    private(set) var process: Background
    private var launches = 1
    /// Variables this mount's process has besides the sandbox's (every launch of it).
    let extraEnvironment: [String: String]

    /// Mounts `mountPoint` (created in the sandbox) with `arguments` after the mount point, and
    /// waits until the kernel shows the mount.
    init(_ sandbox: Sandbox, at name: String, arguments: [String], extraEnvironment: [String: String] = [:]) throws {
        self.sandbox = sandbox
        mountPoint = try sandbox.directory(name)
        self.arguments = arguments
        self.extraEnvironment = extraEnvironment
        sandbox.track(mountPoint: mountPoint)
        process = try Self.launch(sandbox, mountPoint, arguments, log: "\(name).log", extraEnvironment: extraEnvironment)
    }

    /// A mount of `bucket` on `server`, with its store file inside the sandbox.
    convenience init(_ sandbox: Sandbox, at name: String, server: ServerProcess, token: String? = nil, bucket: String = "notes", extra: [String] = []) throws {
        let arguments = [
            "--server", server.url, "--app-id", ServerProcess.appID, "--token", token ?? server.token,
            "--bucket", bucket, "--store", sandbox.root + "/\(name).sqlite",
        ] + extra
        try self.init(sandbox, at: name, arguments: arguments)
    }

    private static func launch(
        _ sandbox: Sandbox, _ mountPoint: String, _ arguments: [String], log: String, extraEnvironment: [String: String]
    ) throws -> Background {
        let process = try sandbox.start(
            ["mount", mountPoint, "--foreground"] + arguments, log: log, endsOnUnmount: true, extraEnvironment: extraEnvironment)
        let mounted = eventually { Mounts.isMounted(mountPoint) || !process.isRunning }
        guard mounted, Mounts.isMounted(mountPoint) else {
            throw SandboxError("bucketfs mount \(mountPoint) did not mount (running: \(process.isRunning)):\n\(process.logTail)")
        }
        return process
    }

    func path(_ relative: String) -> String { mountPoint + "/" + relative }

    /// After the process died (kill -9): detach the dead mount and mount again with the same
    /// arguments (same store, same client id).
    /// `arguments`: mount with these instead (another bucket list); each launch logs to a file of its own.
    func remount(arguments newArguments: [String]? = nil) throws {
        if Mounts.isMounted(mountPoint) {
            let result = try Command.run("/usr/bin/fusermount3", ["-u", mountPoint], timeout: 30)
            if result.status != 0 { _ = try Command.run("/usr/bin/fusermount3", ["-uz", mountPoint], timeout: 30) }
        }
        if let newArguments { arguments = newArguments }
        launches += 1
        let name = URL(fileURLWithPath: mountPoint).lastPathComponent
        process = try Self.launch(
            sandbox, mountPoint, arguments, log: launches == 2 ? "\(name)-again.log" : "\(name)-\(launches).log",
            extraEnvironment: extraEnvironment)
    }

    /// `fusermount3 -u` and waits for the process to finish (it sends what is pending first).
    func unmount(timeout: Double = Patience.seconds) throws -> Bool {
        let result = try Command.run("/usr/bin/fusermount3", ["-u", mountPoint], timeout: 30)
        guard result.status == 0 else { return false }
        return process.waitForExit(timeout: timeout)
    }
}

/// File access the way editors and tools do it, in a python3 child so a stuck mount can only
/// time out, never hang the test process.
enum Files {
    /// Writes `text` with open(O_TRUNC)/write/close; returns when close (the save) returned.
    static func write(_ path: String, _ text: String) throws {
        try Command.python(
            "import sys\nwith open(sys.argv[1], 'w') as f: f.write(sys.argv[2])", [path, text], in: "/")
    }

    /// The whole file, or nil if it cannot be opened.
    static func read(_ path: String) throws -> String? {
        let output = try Command.run(
            "/usr/bin/env", ["python3", "-c", "import sys\ntry: sys.stdout.write(open(sys.argv[1]).read())\nexcept OSError: sys.exit(3)", path])
        return output.status == 0 ? output.stdout : nil
    }

    /// An editor's re-read: open, read, close, and re-open until the file holds `expected`
    /// (nil: until it is gone) or `seconds` pass. Returns the last content seen (nil: missing).
    static func waitFor(_ path: String, toHold expected: String?, seconds: Double = Patience.seconds) throws -> String? {
        let script = """
            import os, sys, time
            path, want, deadline = sys.argv[1], sys.argv[2], time.time() + float(sys.argv[3])
            want = None if sys.argv[4] == 'missing' else want
            while True:
                try:
                    with open(path) as f: seen = f.read()
                except FileNotFoundError:
                    seen = None
                if seen == want or time.time() > deadline: break
                time.sleep(0.02)
            if seen is None: sys.exit(3)
            sys.stdout.write(seen)
            """
        let output = try Command.run(
            "/usr/bin/env", ["python3", "-c", script, path, expected ?? "", "\(seconds)", expected == nil ? "missing" : "present"],
            timeout: seconds + 60)
        return output.status == 0 ? output.stdout : nil
    }
}
