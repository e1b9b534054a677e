import Foundation
import Glibc

/// The system the model test drives, all real: one `bucketfs serve` (its data in the sandbox,
/// restarted on the same port after a kill) and `SyncModel.mountCount` mounts of the same user,
/// each a `bucketfs mount` process with a store of its own. File operations are the libc calls a
/// program makes, from this thread; a mount that stops answering is ended by the sandbox's
/// watchdog, which fails the call instead of hanging the test.
final class SyncWorld {
    let sandbox: Sandbox
    private(set) var server: ServerProcess
    private(set) var mounts: [MountProcess] = []
    /// The buckets each mount has (`notes`, then those it made).
    private(set) var bucketsOf: [Set<Int>]
    private(set) var serverDown = false
    private(set) var serverStopped = false
    private var starts = 0

    init(timeLimit: Double) throws {
        sandbox = try Sandbox(timeLimit: timeLimit)
        bucketsOf = Array(repeating: [0], count: SyncModel.mountCount)
        do {
            server = try ServerProcess.start(in: sandbox)
            for index in 0..<SyncModel.mountCount {
                mounts.append(
                    try MountProcess(
                        sandbox, at: "m\(index)", arguments: mountArguments(index, buckets: [0]),
                        extraEnvironment: Self.extraEnvironment(index)))
            }
        } catch {
            sandbox.close()
            throw error
        }
    }

    func close() { sandbox.close() }

    /// m1 takes every save as a large note's (issue 37): its bytes into the store at once, parsed
    /// afterwards. The model holds it to the same outcomes as the others, which parse at once.
    static func extraEnvironment(_ index: Int) -> [String: String] {
        index == 1 ? ["BUCKETFS_PARSE_LATER_FROM": "1"] : [:]
    }

    private func mountArguments(_ index: Int, buckets: Set<Int>, store: String? = nil) -> [String] {
        [
            "--server", server.url, "--app-id", ServerProcess.appID, "--token", server.token,
            "--store", store ?? sandbox.root + "/m\(index).sqlite",
            // Debug lines (a removal from elsewhere taking or keeping a file, an edit the store
            // refused): a handful per step, for whoever reads a failure's logs.
            "--verbose",
            // Every listing may leave memory once the kernel forgot its files (`forgetInodes`).
            "--released-listing-size", "1",
        ] + buckets.sorted().flatMap { ["--bucket", SyncModel.buckets[$0]] }
    }

    func path(_ mount: Int, _ bucket: Int, _ name: String) -> String {
        mounts[mount].path(SyncModel.buckets[bucket] + "/" + name)
    }

    // MARK: - Faults

    func killServer() {
        guard !serverDown else { return }
        server.process.signal(SIGKILL)
        _ = server.process.waitForExit(timeout: 30)
        serverDown = true
        serverStopped = false
    }

    /// Starts the server again on its data and port (the mounts reconnect to the same URL).
    func restartServer() throws {
        guard serverDown else { return }
        starts += 1
        // The port is free once the killed process is gone; another program may take it meanwhile
        // only in theory, and a bind that fails is tried again.
        var attempt = 0
        while true {
            attempt += 1
            let process = try sandbox.start(
                ["serve", "--data", server.dataDirectory, "--port", "\(server.port)"], log: "server-\(starts)-\(attempt).log")
            let listening = eventually(120) { process.log.contains("listening on") || !process.isRunning }
            if listening && process.isRunning {
                server = ServerProcess(
                    process: process, port: server.port, dataDirectory: server.dataDirectory, username: server.username,
                    token: server.token)
                serverDown = false
                return
            }
            process.signal(SIGKILL)
            guard attempt < 20 else {
                throw SandboxError("bucketfs serve did not start again on port \(server.port):\n\(process.logTail)")
            }
            Thread.sleep(forTimeInterval: 0.5)
        }
    }

    /// Copies of the server's data directory, newest last (`backupServer`).
    private var backups: [String] = []
    /// Backups taken so far: each its own directory (`cp -a` onto an existing one copies into it).
    private var backupsTaken = 0

    /// A file backup: the data directory copied while the server is paused (SIGSTOP), so the
    /// copy is one moment of it (SQLite recovers its WAL when the copy is served).
    func backupServer() throws {
        guard !serverDown else { return }
        let wasStopped = serverStopped
        if !wasStopped { server.process.signal(SIGSTOP) }
        defer { if !wasStopped { server.process.signal(SIGCONT) } }
        let copy = sandbox.root + "/server-backup-\(backupsTaken)"
        backupsTaken += 1
        let copied = try Command.run("/bin/cp", ["-a", server.dataDirectory, copy], timeout: 120)
        guard copied.status == 0 else { throw SandboxError("backing up the server: \(copied.stderr)") }
        backups.append(copy)
        if backups.count > 3 {
            _ = try? Command.run("/bin/rm", ["-rf", backups.removeFirst()], timeout: 120)
        }
    }

    /// kill -9 of the server, its data directory replaced by a backup (`back` counted from the
    /// newest), and the server started on it on the same port. Nothing without a backup.
    func restoreServer(back: Int) throws {
        guard !backups.isEmpty else { return }
        let backup = backups[backups.count - 1 - min(back, backups.count - 1)]
        continueServer()
        killServer()
        for command in [["-rf", server.dataDirectory]] {
            let removed = try Command.run("/bin/rm", command, timeout: 120)
            guard removed.status == 0 else { throw SandboxError("restoring the server: \(removed.stderr)") }
        }
        let copied = try Command.run("/bin/cp", ["-a", backup, server.dataDirectory], timeout: 120)
        guard copied.status == 0 else { throw SandboxError("restoring the server: \(copied.stderr)") }
        try restartServer()
    }

    func stopServer() {
        guard !serverDown, !serverStopped else { return }
        server.process.signal(SIGSTOP)
        serverStopped = true
    }

    func continueServer() {
        guard serverStopped else { return }
        server.process.signal(SIGCONT)
        serverStopped = false
    }

    /// The server up and answering, whatever the faults left it in.
    func serverBack() throws {
        continueServer()
        try restartServer()
    }

    /// kill -9 of a mount, then a mount of the same store again.
    func killMount(_ index: Int) throws {
        mounts[index].process.signal(SIGKILL)
        _ = mounts[index].process.waitForExit(timeout: 30)
        try mounts[index].remount(arguments: mountArguments(index, buckets: bucketsOf[index]))
    }

    /// The kernel forgets every inode nothing holds (as under memory pressure). A step that
    /// cannot (not root, no /proc) fails the run rather than pass without forgetting.
    func forgetInodes() throws(Posix.Failure) {
        let fd = Glibc.open("/proc/sys/vm/drop_caches", O_WRONLY)
        guard fd >= 0 else { throw Posix.Failure(call: "open /proc/sys/vm/drop_caches", code: errno) }
        defer { Glibc.close(fd) }
        guard Glibc.write(fd, "2\n", 2) == 2 else { throw Posix.Failure(call: "write /proc/sys/vm/drop_caches", code: errno) }
    }

    /// mkdir of a bucket at the mount's top.
    func makeBucket(_ index: Int, _ bucket: Int) -> Int32 {
        let result = Posix.mkdir(mounts[index].path(SyncModel.buckets[bucket]))
        if result == 0 { bucketsOf[index].insert(bucket) }
        return result
    }

    /// A mount with a new store, of every bucket any mount has: what the server holds.
    func freshMount() throws -> MountProcess {
        let buckets = bucketsOf.reduce(Set<Int>()) { $0.union($1) }
        return try MountProcess(
            sandbox, at: "fresh", arguments: mountArguments(99, buckets: buckets, store: sandbox.root + "/fresh.sqlite"))
    }

    /// `bucketfs sync` of a mount: nil when the server has every change, else what it said.
    func sync(_ index: Int) -> String? {
        do {
            let output = try sandbox.bucketfs(["sync", mounts[index].mountPoint, "--timeout", "150"], timeout: 200)
            return output.status == 0 ? nil : "bucketfs sync m\(index) exited \(output.status): \(output.stdout)\(output.stderr)"
        } catch {
            return "bucketfs sync m\(index): \(error)"
        }
    }

    /// The processes' logs, last lines, every launch of each (a mount killed and mounted again
    /// logs to a file per launch): for failure messages.
    func logTails() -> String {
        var text = "server log:\n" + server.process.logTail
        let files = ((try? FileManager.default.contentsOfDirectory(atPath: sandbox.root)) ?? []).filter { $0.hasSuffix(".log") }
        for index in mounts.indices {
            let launches = files.filter { $0 == "m\(index).log" || $0.hasPrefix("m\(index)-") }.sorted {
                Self.launchNumber($0) < Self.launchNumber($1)
            }
            for name in launches {
                let log = (try? String(contentsOfFile: sandbox.root + "/" + name, encoding: .utf8)) ?? ""
                text += "\n\(name):\n" + Background.tail(of: log)
            }
        }
        return text
    }

    /// m1.log 1, m1-again.log 2, m1-3.log 3, ...
    private static func launchNumber(_ name: String) -> Int {
        if !name.contains("-") { return 1 }
        if name.contains("-again") { return 2 }
        return Int(name.split(separator: "-").last?.split(separator: ".").first ?? "") ?? 99
    }
}

/// What a directory holds: name -> bytes (nil when the directory cannot be read).
typealias Listing = [String: [UInt8]]

/// The libc calls the model's operations are made of; each returns 0 or an errno.
enum Posix {
    /// A call that failed: which one, and its errno (the same errno means different things
    /// from open and from close).
    struct Failure: Error, CustomStringConvertible {
        let call: String
        let code: Int32
        var description: String { "\(call): \(Posix.describe(code))" }
    }

    /// open(O_CREAT|O_TRUNC), write, (fsync,) close: nil, or the first call that failed.
    static func write(_ path: String, _ bytes: [UInt8], fsync: Bool) -> Failure? {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        guard fd >= 0 else { return Failure(call: "open", code: errno) }
        var failure: Failure?
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
            if written < 0 {
                failure = Failure(call: "write", code: errno)
                break
            }
            offset += written
        }
        if failure == nil && fsync && Glibc.fsync(fd) != 0 { failure = Failure(call: "fsync", code: errno) }
        if Glibc.close(fd) != 0 && failure == nil { failure = Failure(call: "close", code: errno) }
        return failure
    }

    static func rename(_ from: String, _ to: String) -> Int32 { Glibc.rename(from, to) == 0 ? 0 : errno }
    static func unlink(_ path: String) -> Int32 { Glibc.unlink(path) == 0 ? 0 : errno }
    static func truncate(_ path: String) -> Int32 { Glibc.truncate(path, 0) == 0 ? 0 : errno }
    static func mkdir(_ path: String) -> Int32 { Glibc.mkdir(path, 0o755) == 0 ? 0 : errno }

    /// Every file of the directory with its bytes; nil when it cannot be listed.
    static func list(_ directory: String) -> Listing? {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: directory) else { return nil }
        var listing: Listing = [:]
        for name in names {
            switch read(directory + "/" + name) {
            case .success(let bytes): listing[name] = bytes
            // Removed between the listing and the read (a remote change): not there.
            case .failure(let failure) where failure.code == ENOENT: continue
            // Any other error shows in what differs, by name (not as a file that is gone).
            case .failure(let failure): listing[name] = Array("<\(failure)>".utf8)
            }
        }
        return listing
    }

    /// The file's bytes, or the call that failed.
    static func read(_ path: String) -> Result<[UInt8], Failure> {
        let fd = open(path, O_RDONLY)
        guard fd >= 0 else { return .failure(Failure(call: "open", code: errno)) }
        defer { Glibc.close(fd) }
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if count < 0 { return .failure(Failure(call: "read", code: errno)) }
            if count == 0 { return .success(bytes) }
            bytes += buffer[0..<count]
        }
    }

    static func describe(_ code: Int32) -> String {
        code == 0 ? "ok" : (POSIXErrorCode(rawValue: code).map { "\($0)" } ?? "errno \(code)")
    }
}
