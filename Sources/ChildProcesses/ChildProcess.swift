import CSpawn
import Foundation
import Glibc
import Synchronization

/// A child process started with posix_spawn and reaped by a thread of its own: what bucketfs and
/// its tests use instead of Foundation's `Process`, with the same names for what they use of it.
///
/// Why not `Process`: on Linux (swift-corelibs-foundation as of Swift 6.3.1) every `run()` reads
/// `/proc/self/fd` copying each entry's whole 256-byte name, past the end of short records, and
/// crashes the process now and then when a record ends a mapping (swift-corelibs-foundation PR
/// 5472); it also adds one close action per open descriptor. Here the child closes everything
/// above standard error in one action (glibc's `posix_spawn_file_actions_addclosefrom_np`), starts
/// with every signal's default action and an empty mask (a parent's blocked or ignored signals do
/// not leak into it), and a thread waits for its exit.
public final class ChildProcess: @unchecked Sendable {
    public enum TerminationReason: Sendable {
        case exit
        case uncaughtSignal
    }

    public struct SpawnError: Error, CustomStringConvertible {
        public let executable: String
        public let code: Int32
        public var description: String { "cannot start \(executable): \(String(cString: strerror(code)))" }
    }

    // Set before `run()`, as on `Process`.
    public var executableURL: URL?
    public var arguments: [String]?
    /// nil: this process's environment.
    public var environment: [String: String]?
    /// nil: this process's working directory.
    public var currentDirectoryURL: URL?
    /// A `Pipe`, a `FileHandle`, or nil for /dev/null; this process's own by default.
    public var standardInput: Any? = FileHandle.standardInput
    public var standardOutput: Any? = FileHandle.standardOutput
    public var standardError: Any? = FileHandle.standardError
    /// Called on the reaping thread once the child has exited.
    public var terminationHandler: (@Sendable (ChildProcess) -> Void)?
    /// A process group of its own (as `Process` starts every child), so that a terminal's ^C
    /// reaches only the parent, which decides what its children get.
    public var startsProcessGroup = true

    private struct State {
        var pid: pid_t = 0
        var running = false
        /// Exited, not yet reaped: no more signals (its number is about to be free for reuse).
        var ending = false
        var status: Int32 = 0
        var reason = TerminationReason.exit
    }

    private let state = Mutex(State())
    private let exited = NSCondition()

    public init() {}

    public var processIdentifier: Int32 { state.withLock { $0.pid } }
    public var isRunning: Bool { state.withLock { $0.running } }

    /// The exit status, or the signal that ended it (`terminationReason`).
    public var terminationStatus: Int32 {
        state.withLock { state in
            precondition(state.pid != 0 && !state.running, "the child process has not ended")
            return state.status
        }
    }

    public var terminationReason: TerminationReason {
        state.withLock { state in
            precondition(state.pid != 0 && !state.running, "the child process has not ended")
            return state.reason
        }
    }

    public func run() throws {
        guard let executable = executableURL?.path else { throw SpawnError(executable: "(no executable)", code: ENOENT) }
        precondition(state.withLock { $0.pid } == 0, "a child process runs once")
        let argv = ([executable] + (arguments ?? [])).map { strdup($0) } + [nil]
        defer { for pointer in argv { free(pointer) } }
        let variables = environment ?? ProcessInfo.processInfo.environment
        let envp = variables.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { for pointer in envp { free(pointer) } }
        var pid: pid_t = 0
        let newGroup: Int32 = startsProcessGroup ? 1 : 0
        let result = Self.descriptor(standardInput, reading: true) { input in
            Self.descriptor(standardOutput, reading: false) { output in
                Self.descriptor(standardError, reading: false) { error in
                    let start = { (directory: UnsafePointer<CChar>?) in
                        bucketfs_spawn(&pid, executable, argv, envp, directory, input, output, error, newGroup)
                    }
                    guard let directory = currentDirectoryURL?.path else { return start(nil) }
                    return directory.withCString { start($0) }
                }
            }
        }
        guard result == 0 else { throw SpawnError(executable: executable, code: result) }
        // The child has its copies: the ends of pipes it uses are closed here, so that the
        // parent's reads see the end when the child (and whatever inherited them) closes them.
        if let pipe = standardInput as? Pipe { try? pipe.fileHandleForReading.close() }
        if let pipe = standardOutput as? Pipe { try? pipe.fileHandleForWriting.close() }
        if let pipe = standardError as? Pipe { try? pipe.fileHandleForWriting.close() }
        let child = pid
        state.withLock {
            $0.pid = child
            $0.running = true
        }
        let reaper = Thread { [self] in reap(child) }
        reaper.name = "reap \(child)"
        reaper.stackSize = 256 << 10
        reaper.start()
    }

    /// Blocks until the child has exited.
    public func waitUntilExit() {
        exited.lock()
        defer { exited.unlock() }
        while isRunning { exited.wait() }
    }

    /// SIGTERM.
    public func terminate() { signal(SIGTERM) }

    /// SIGINT.
    public func interrupt() { signal(SIGINT) }

    private func signal(_ number: Int32) {
        // Only while it runs: once reaped, its number may be another process's.
        state.withLock { state in
            precondition(state.pid != 0, "the child process has not started")
            if state.running && !state.ending { _ = kill(state.pid, number) }
        }
    }

    private func reap(_ pid: pid_t) {
        // Waited for without reaping first: until `ending` is set, `signal` may still send to
        // this number, which must stay the child's.
        var info = siginfo_t()
        while waitid(P_PID, id_t(pid), &info, WEXITED | WNOWAIT) < 0 && errno == EINTR {}
        state.withLock { $0.ending = true }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        let signalled = status & 0x7f != 0
        exited.lock()
        state.withLock { state in
            state.running = false
            state.status = signalled ? status & 0x7f : (status >> 8) & 0xff
            state.reason = signalled ? .uncaughtSignal : .exit
        }
        exited.broadcast()
        exited.unlock()
        terminationHandler?(self)
    }

    /// The descriptor the child gets for one of its standard streams: a pipe's end, a file
    /// handle's descriptor, or -1 (/dev/null).
    private static func descriptor<T>(_ stream: Any?, reading: Bool, _ body: (Int32) -> T) -> T {
        switch stream {
        case let pipe as Pipe:
            return body(reading ? pipe.fileHandleForReading.fileDescriptor : pipe.fileHandleForWriting.fileDescriptor)
        case let handle as FileHandle:
            return body(handle.fileDescriptor)
        default:
            return body(-1)
        }
    }
}
