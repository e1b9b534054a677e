import Foundation

/// A PostgreSQL cluster of the benchmark's own: initdb into a temp dir, started on a free
/// loopback port (as the `postgres` user when run as root: PostgreSQL refuses root), stopped and
/// removed by `stop()`. Production durability (fsync on) so the numbers are what a node gets.
public final class BenchPostgres: Sendable {
    public let port: Int
    private let directory: String
    private let binDirectory: String

    public static func start() throws -> BenchPostgres {
        let root = "/usr/lib/postgresql"
        let versions = ((try? FileManager.default.contentsOfDirectory(atPath: root)) ?? []).compactMap(Int.init).sorted()
        guard let version = versions.last(where: { FileManager.default.isExecutableFile(atPath: "\(root)/\($0)/bin/initdb") }) else {
            throw BenchFailure("PostgreSQL is not installed (no \(root)/*/bin/initdb): apt-get install postgresql")
        }
        let cluster = BenchPostgres(port: try freePort(), directory: temporaryPath("bucketfs-bench-pg"), binDirectory: "\(root)/\(version)/bin")
        try cluster.initialize()
        return cluster
    }

    private init(port: Int, directory: String, binDirectory: String) {
        self.port = port
        self.directory = directory
        self.binDirectory = binDirectory
    }

    private func initialize() throws {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        if getuid() == 0 { try shell("chown -R postgres:postgres \(directory)") }
        try shell(asOwner("\(binDirectory)/initdb -D \(directory)/data -A trust -U postgres --no-locale -E UTF8"))
        try shell(asOwner(
            "\(binDirectory)/pg_ctl -D \(directory)/data -l \(directory)/postgres.log -w -t 60"
                + " -o '-p \(port) -k \(directory) -c listen_addresses=127.0.0.1 -c max_connections=100' start"))
    }

    /// A new empty database's URL for `bucketfs serve --database`.
    public func createDatabase(_ name: String) throws -> String {
        try shell(asOwner("\(binDirectory)/createdb -h 127.0.0.1 -p \(port) -U postgres \(name)"))
        return "postgres://postgres@127.0.0.1:\(port)/\(name)"
    }

    /// CPU seconds (user + system) the cluster's processes have used so far: the postmaster,
    /// the backends it has reaped, and those still running.
    public func cpuSeconds() -> Double {
        guard let text = try? String(contentsOfFile: "\(directory)/data/postmaster.pid", encoding: .utf8),
              let postmaster = text.split(separator: "\n").first.flatMap({ Int32($0) })
        else { return 0 }
        var ticks = 0
        for entry in (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? [] {
            guard let pid = Int32(entry), let stat = ProcessStat(pid: pid) else { continue }
            if pid == postmaster {
                ticks += stat.userTicks + stat.systemTicks + stat.childUserTicks + stat.childSystemTicks
            } else if stat.parent == postmaster {
                ticks += stat.userTicks + stat.systemTicks
            }
        }
        return Double(ticks) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    public func stop() {
        try? shell(asOwner("\(binDirectory)/pg_ctl -D \(directory)/data -m fast -w stop"))
        try? FileManager.default.removeItem(atPath: directory)
    }

    private func asOwner(_ command: String) -> String {
        getuid() == 0 ? "/usr/sbin/runuser -u postgres -- \(command)" : command
    }
}

/// This process's CPU seconds (user + system) so far.
public func processCPUSeconds() -> Double {
    var usage = rusage()
    getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage)
    return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
}

/// The fields of /proc/PID/stat the CPU accounting needs.
private struct ProcessStat {
    var parent: Int32
    var userTicks: Int
    var systemTicks: Int
    var childUserTicks: Int
    var childSystemTicks: Int

    init?(pid: Int32) {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let close = text.lastIndex(of: ")")
        else { return nil }
        // After "pid (comm) ": state, ppid, ... utime is field 14 of the whole line, 12 here.
        let fields = text[text.index(after: close)...].split(separator: " ")
        guard fields.count > 15, let parent = Int32(fields[1]), let user = Int(fields[11]), let system = Int(fields[12]),
              let childUser = Int(fields[13]), let childSystem = Int(fields[14])
        else { return nil }
        (self.parent, userTicks, systemTicks, childUserTicks, childSystemTicks) = (parent, user, system, childUser, childSystem)
    }
}

/// Runs `command` with /bin/sh and waits for it; its output goes to a log file, and descriptors
/// beyond stderr are closed first (the PostgreSQL server pg_ctl starts would keep this
/// process's sockets open).
private func shell(_ command: String) throws {
    let log = temporaryPath("bucketfs-bench-sh")
    defer { try? FileManager.default.removeItem(atPath: log) }
    let script = #"for fd in /proc/$$/fd/*; do n=${fd##*/}; if [ "$n" -gt 2 ]; then eval "exec $n>&-"; fi; done 2>/dev/null; "#
        + "exec \(command) </dev/null >\(log) 2>&1"
    var pid: pid_t = 0
    let arguments: [String] = ["/bin/bash", "-c", script]
    let argv: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) } + [nil]
    defer { for pointer in argv { free(pointer) } }
    let spawned = posix_spawn(&pid, "/bin/bash", nil, nil, argv, environ)
    guard spawned == 0 else { throw BenchFailure("cannot run \(command): \(spawned)") }
    var status: Int32 = 0
    while waitpid(pid, &status, 0) < 0 {
        guard errno == EINTR else { throw BenchFailure("waitpid failed: \(errno)") }
    }
    guard status == 0 else {
        throw BenchFailure("\(command) failed (status \(status)): \((try? String(contentsOfFile: log, encoding: .utf8)) ?? "")")
    }
}

private func freePort() throws -> Int {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw BenchFailure("socket failed") }
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let named = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
            bind(fd, pointer, length) == 0 && getsockname(fd, pointer, &length) == 0
        }
    }
    guard named else { throw BenchFailure("no free port") }
    return Int(UInt16(bigEndian: address.sin_port))
}
