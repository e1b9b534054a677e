import ChildProcesses
import Foundation

/// Runs `bucketfs mount ... --foreground` as a detached process and waits until the mount is up,
/// the way mount helpers behave: the command returns when the file system can be used.
enum Daemon {
    static func startInBackground(mountpoint: String, logFile: String?, timeout: Duration = .seconds(60)) throws {
        try Paths.createDirectory(Paths.stateDirectory)
        let logPath = logFile ?? Paths.logFile(for: mountpoint)
        if !FileManager.default.fileExists(atPath: logPath) {
            _ = FileManager.default.createFile(atPath: logPath, contents: nil)
        }
        guard let log = FileHandle(forWritingAtPath: logPath) else {
            throw CommandError("cannot write the log file \(logPath)")
        }
        _ = try? log.seekToEnd()
        var environment = ProcessInfo.processInfo.environment
        if BucketFSCommand.arguments.contains("--user"), environment["BUCKETFS_PASSWORD"] == nil {
            // The background process has no terminal to ask on.
            environment["BUCKETFS_PASSWORD"] = try Credentials.readPassword(prompt: "Password: ")
        }
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        // The child logs to standard error, which is the log file here.
        var arguments = BucketFSCommand.arguments
        if let index = arguments.firstIndex(of: "--log-file"), index + 1 < arguments.count {
            arguments.removeSubrange(index...(index + 1))
        }
        arguments.removeAll { $0.hasPrefix("--log-file=") }
        process.arguments = arguments + ["--foreground"]
        process.environment = environment
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = log
        process.standardError = log
        do { try process.run() } catch { throw CommandError("cannot start the mount process: \(error)") }

        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if isMounted(mountpoint) {
                print("bucketfs: mounted at \(mountpoint) (log: \(logPath))")
                return
            }
            if !process.isRunning {
                let tail = (try? String(contentsOfFile: logPath, encoding: .utf8))?
                    .split(separator: "\n").suffix(5).joined(separator: "\n") ?? ""
                throw CommandError("the mount process stopped before mounting:\n\(tail)")
            }
            Thread.sleep(forTimeInterval: 0.05)
        }
        throw CommandError("\(mountpoint) was not mounted after \(timeout); see \(logPath)")
    }
}

enum Credentials {
    /// The password from $BUCKETFS_PASSWORD, else one line of standard input (not echoed on a terminal).
    static func readPassword(prompt: String) throws -> String {
        if let password = ProcessInfo.processInfo.environment["BUCKETFS_PASSWORD"], !password.isEmpty {
            return password
        }
        if isatty(STDIN_FILENO) == 1, let entered = getpass(prompt) {
            return String(cString: entered)
        }
        guard let line = readLine(), !line.isEmpty else {
            throw CommandError("no password: set BUCKETFS_PASSWORD or pass it on standard input")
        }
        return line
    }
}
