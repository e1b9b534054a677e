import BucketFS
import ChildProcesses
import Foundation
import SyncStore
import Testing

/// The file-system tests' bounds, in one place. Each is a hang guard sized for a machine several
/// times slower than a quiet one (other builds running beside the tests, load average 10 and up
/// on 2 cores), never a claim about speed: a passing test waits only as long as what it waits
/// for takes, so raising these costs nothing until something hangs.
enum Patience {
    /// A wait for something that must happen: a remote change shown, a loop ended, a tool done.
    static let seconds: Double = 300
    /// A mount's watchdog: past it the mount is aborted, so a stuck test fails instead of hanging.
    static let mountSeconds: Double = 600
    /// Each mount test's limit (Swift Testing counts whole minutes): above the watchdog, so the
    /// watchdog's clean-up comes first. The clock runs from the moment the test is scheduled,
    /// which on a busy machine can be long before it gets a thread to run on.
    static let testMinutes = 12
}

/// A real FUSE mount of a real SQLite store in a temp dir. `close()` always unmounts (normal,
/// then lazy plus connection abort); a watchdog aborts the FUSE connection if a test overruns, so
/// a hung mount fails the test instead of hanging the suite.
final class MountFixture: @unchecked Sendable {
    let directory: URL
    let mountPoint: String
    let storePath: String
    private var syncStore: SyncStore
    private var backend: SyncStoreBackend
    private(set) var fileSystem: BucketFileSystem
    private let watchdog: DispatchWorkItem
    private var closed = false
    private let onOpenedForWriting: @Sendable (_ bucket: String, _ key: String) -> Void

    /// Mounts a store (new, or `storePath` of an earlier fixture) with bucket `notes`;
    /// `formats`: buckets shown other than as JSON (a text view).
    init(
        storePath existingStore: String? = nil, buckets: [String] = ["notes"], options: MountOptions = MountOptions(),
        formats: [String: any EntityFileFormat] = [:], timeLimit: Double = Patience.mountSeconds,
        onOpenedForWriting: @escaping @Sendable (_ bucket: String, _ key: String) -> Void = { _, _ in }
    ) throws {
        self.onOpenedForWriting = onOpenedForWriting
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("bucketfs-test-\(UUID().uuidString)")
        let mount = directory.appendingPathComponent("mnt")
        try FileManager.default.createDirectory(at: mount, withIntermediateDirectories: true)
        mountPoint = mount.path
        storePath = existingStore ?? directory.appendingPathComponent("store.sqlite").path
        syncStore = try SyncStore(path: storePath)
        for bucket in buckets { _ = try syncStore.ensureBucket(bucket) }
        for (bucket, format) in formats { try syncStore.setFileFormat(format, forBucket: bucket) }
        backend = SyncStoreBackend(store: syncStore, onOpenedForWriting: onOpenedForWriting)
        fileSystem = BucketFileSystem(backend: backend)
        try fileSystem.mount(at: mountPoint, options: options)
        fileSystem.start()
        let mountPoint = self.mountPoint
        watchdog = DispatchWorkItem {
            guard let device = Self.fuseDevice(of: mountPoint) else { return }
            Issue.record("mount at \(mountPoint) exceeded its time limit; detaching and aborting it")
            // Abort needs fusectl (/sys/fs/fuse/connections); the lazy unmount works everywhere.
            ConnectionAbort(device: device)?.abort()
            _ = try? Tool.run("/usr/bin/fusermount3", ["-uz", mountPoint], timeout: 30)
        }
        DispatchQueue.global().asyncAfter(deadline: .now() + timeLimit, execute: watchdog)
    }

    /// The mount's store, once it has every save made through the mount so far (saves reach it
    /// through the save journal, a moment after close(2) returns). Should that wait fail, the
    /// store as it is: what the test then reads shows what it lacks.
    var store: SyncStore {
        try? backend.waitForJournaledEdits()
        return syncStore
    }

    /// Whether a change made through the mount so far would not survive a power loss (the
    /// save journal or the store has it, but not on disk yet).
    var hasUnsyncedChanges: Bool { backend.hasUnsyncedChanges }

    /// Path of a name inside the mount.
    func path(_ relative: String) -> String { mountPoint + "/" + relative }

    /// Unmounts and waits for the loop to end (flushing saves); keeps the store file.
    func unmount() {
        guard !closed else { return }
        closed = true
        watchdog.cancel()
        if !fileSystem.unmount(timeout: Patience.seconds) {
            let abort = ConnectionAbort(mountedAt: mountPoint)
            _ = try? Tool.run("/usr/bin/fusermount3", ["-uz", mountPoint], timeout: 30)
            abort?.abort()
            Issue.record("file system loop did not end within \(Patience.seconds) s of unmount")
            _ = fileSystem.waitUntilStopped(timeout: 30)
        }
        try? syncStore.close()
    }

    /// Unmounts, then mounts the same store again (stable inodes, persisted bytes).
    func remount() throws {
        unmount()
        syncStore = try SyncStore(path: storePath)
        backend = SyncStoreBackend(store: syncStore, onOpenedForWriting: onOpenedForWriting)
        fileSystem = BucketFileSystem(backend: backend)
        try fileSystem.mount(at: mountPoint, options: MountOptions())
        fileSystem.start()
        closed = false
    }

    /// Unmounts and removes the temp dir.
    func close() {
        unmount()
        try? FileManager.default.removeItem(at: directory)
    }

    static func fuseDevice(of mountPoint: String) -> String? {
        BucketFileSystem.fuseDevice(of: mountPoint)
    }
}

/// Runs real tools with a deadline (a tool stuck on the mount is killed, never waited on forever).
enum Tool {
    struct Output {
        let status: Int32
        let stdout: String
        let stderr: String
    }

    struct TimedOut: Error, CustomStringConvertible {
        let command: String
        var description: String { "timed out: \(command)" }
    }

    static func run(
        _ executable: String, _ arguments: [String], directory: String? = nil, timeout: Double = Patience.seconds
    ) throws -> Output {
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        if let directory { process.currentDirectoryURL = URL(fileURLWithPath: directory) }
        let stdout = Pipe()
        let stderr = Pipe()
        process.standardOutput = stdout
        process.standardError = stderr
        process.standardInput = FileHandle.nullDevice
        let done = DispatchSemaphore(value: 0)
        process.terminationHandler = { _ in done.signal() }
        try process.run()
        // Read while the process runs so a full pipe cannot block it.
        let outputs = OutputCollector(stdout: stdout, stderr: stderr)
        if done.wait(timeout: .now() + timeout) == .timedOut {
            process.terminate()
            kill(process.processIdentifier, SIGKILL)
            throw TimedOut(command: ([executable] + arguments).joined(separator: " "))
        }
        let (out, err) = outputs.finish()
        return Output(status: process.terminationStatus, stdout: out, stderr: err)
    }

    /// `sh -c script` in `directory`; fails the test with stderr when the status is not 0.
    @discardableResult
    static func shell(
        _ script: String, in directory: String, timeout: Double = Patience.seconds, expectSuccess: Bool = true
    ) throws -> Output {
        let output = try run("/bin/sh", ["-c", script], directory: directory, timeout: timeout)
        if expectSuccess {
            #expect(output.status == 0, "`\(script)` failed: \(output.stderr)")
        }
        return output
    }

    /// python3 -c `code` in `directory`.
    static func python(_ code: String, in directory: String, timeout: Double = Patience.seconds) throws -> Output {
        let output = try run("/usr/bin/env", ["python3", "-c", code], directory: directory, timeout: timeout)
        #expect(output.status == 0, "python failed: \(output.stderr)")
        return output
    }
}

private final class OutputCollector: @unchecked Sendable {
    private var out = Data()
    private var err = Data()
    private let group = DispatchGroup()

    init(stdout: Pipe, stderr: Pipe) {
        for (pipe, isOut) in [(stdout, true), (stderr, false)] {
            group.enter()
            // Own threads, not Dispatch's pool: blocked readers there delay other work by seconds.
            Thread.detachNewThread { [self] in
                let data = pipe.fileHandleForReading.readDataToEndOfFile()
                if isOut { out = data } else { err = data }
                group.leave()
            }
        }
    }

    func finish() -> (String, String) {
        _ = group.wait(timeout: .now() + 30)
        return (String(decoding: out, as: UTF8.self), String(decoding: err, as: UTF8.self))
    }
}

/// Polls `condition` for up to `seconds` (what the mount shows of a remote change or a save
/// arrives asynchronously by design); a hang guard, not a speed check.
func eventually(_ seconds: Double = Patience.seconds, _ condition: () throws -> Bool) rethrows -> Bool {
    let deadline = Date(timeIntervalSinceNow: seconds)
    while Date() < deadline {
        if try condition() { return true }
        Thread.sleep(forTimeInterval: 0.05)
    }
    return try condition()
}
