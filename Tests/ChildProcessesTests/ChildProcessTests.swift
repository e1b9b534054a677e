import ChildProcesses
import Foundation
import Glibc
import Testing

/// ChildProcess: what bucketfs and its tests start processes with (instead of Foundation's Process).
@Suite(.timeLimit(.minutes(1)))
struct ChildProcessTests {
    /// Runs `/bin/sh -c script` to its end; returns the process and what it wrote to standard output.
    private func shell(_ script: String, configure: (ChildProcess) -> Void = { _ in }) throws -> (ChildProcess, String) {
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = ["-c", script]
        let output = Pipe()
        process.standardOutput = output
        configure(process)
        try process.run()
        let bytes = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process, String(decoding: bytes, as: UTF8.self))
    }

    @Test func anExitStatusAndASignalAreTold() throws {
        let (exited, _) = try shell("exit 3")
        #expect(!exited.isRunning)
        #expect(exited.terminationReason == .exit)
        #expect(exited.terminationStatus == 3)
        let (killed, _) = try shell("kill -9 $$")
        #expect(killed.terminationReason == .uncaughtSignal)
        #expect(killed.terminationStatus == SIGKILL)
    }

    @Test func argumentsEnvironmentAndDirectoryReachTheChild() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("child-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let (_, output) = try shell("printf '%s|%s|%s' \"$0\" \"$GREETING\" \"$(pwd -P)\"") { process in
            process.arguments! += ["first argument"]
            process.environment = ["GREETING": "hello there", "PATH": "/usr/bin:/bin"]
            process.currentDirectoryURL = directory
        }
        #expect(output == "first argument|hello there|\(directory.resolvingSymlinksInPath().path)")
    }

    /// Only standard input, output and error reach the child: a descriptor of the parent's (a
    /// socket of a server under test, say) held by a child that outlives the test would keep it open.
    @Test func noOtherDescriptorIsInherited() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("child-\(UUID().uuidString)").path
        let inheritable = open(path, O_WRONLY | O_CREAT, 0o600)  // no O_CLOEXEC
        #expect(inheritable > 2)
        defer {
            close(inheritable)
            unlink(path)
        }
        let (_, output) = try shell("ls /proc/$$/fd")
        #expect(output.split(separator: "\n").sorted() == ["0", "1", "2"])
    }

    /// The child starts with no signal blocked or ignored, whatever the parent's threads do
    /// (the Swift runtime ignores SIGPIPE): `terminate()` ends it.
    @Test func signalsHaveTheirDefaultActions() throws {
        // grep reads its own status (exec: no shell around it, whose mask changes while it waits).
        let (_, output) = try shell("exec grep -E '^Sig(Blk|Ign)' /proc/self/status")
        // The classic signals 1-31 (the real-time ones glibc keeps for itself it does not let
        // posix_spawn touch).
        let masks = output.split(separator: "\n").compactMap { line in line.split(separator: "\t").last.flatMap { UInt64($0, radix: 16) } }
        #expect(masks.count == 2)
        #expect(masks.allSatisfy { $0 & 0x7fff_ffff == 0 }, "\(output)")

        let sleeper = ChildProcess()
        sleeper.executableURL = URL(fileURLWithPath: "/bin/sleep")
        sleeper.arguments = ["60"]
        let ended = Ended()
        sleeper.terminationHandler = { _ in ended.set() }
        try sleeper.run()
        #expect(sleeper.isRunning)
        #expect(sleeper.processIdentifier > 0)
        sleeper.terminate()
        sleeper.waitUntilExit()
        #expect(sleeper.terminationReason == .uncaughtSignal)
        #expect(sleeper.terminationStatus == SIGTERM)
        #expect(ended.wait(seconds: 30))
    }

    @Test func aMissingExecutableThrows() {
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: "/nonexistent/tool")
        #expect(throws: ChildProcess.SpawnError.self) { try process.run() }
        #expect(!process.isRunning)
    }

    /// Many children at once, each reaped by its own thread: every status is its own.
    @Test func concurrentChildrenKeepTheirOwnStatus() throws {
        let processes = try (0..<40).map { index -> ChildProcess in
            let process = ChildProcess()
            process.executableURL = URL(fileURLWithPath: "/bin/sh")
            process.arguments = ["-c", "exit \(index)"]
            process.standardOutput = nil
            try process.run()
            return process
        }
        for (index, process) in processes.enumerated() {
            process.waitUntilExit()
            #expect(process.terminationStatus == Int32(index))
        }
    }
}

/// A flag a termination handler sets, waited for with a bound.
private final class Ended: @unchecked Sendable {
    private let condition = NSCondition()
    private var done = false

    func set() {
        condition.lock()
        done = true
        condition.broadcast()
        condition.unlock()
    }

    func wait(seconds: Double) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        let deadline = Date(timeIntervalSinceNow: seconds)
        while !done, condition.wait(until: deadline) {}
        return done
    }
}
