#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The process's open-file limit (issue 20: at 1,024 descriptors a flood of connections left
/// none for SQLite, "unable to open database file", nor for libdispatch, which aborted).
public enum DescriptorLimit {
    /// Descriptors kept for everything but connections: the database (pool readers, WAL, shm),
    /// the runtime (libdispatch reads /proc), logs, listening sockets, and one being accepted.
    public static func reserved(forLimit limit: Int) -> Int { 64 + limit / 16 }

    /// The soft limit (what the process may open now).
    public static var soft: Int {
        var limit = rlimit()
        guard getrlimit(resourceLimitNoFile, &limit) == 0 else { return 1024 }
        // RLIM_INFINITY is the largest value: read as "plenty".
        return limit.rlim_cur >= rlim_t(Int32.max) ? Int(Int32.max) : Int(limit.rlim_cur)
    }

    /// Raises the soft limit to the hard one (a server should use what it is allowed);
    /// returns the soft limit in force afterwards.
    @discardableResult
    public static func raiseSoftToHard() -> Int {
        var limit = rlimit()
        guard getrlimit(resourceLimitNoFile, &limit) == 0 else { return soft }
        if limit.rlim_cur < limit.rlim_max {
            limit.rlim_cur = limit.rlim_max
            _ = setrlimit(resourceLimitNoFile, &limit)
        }
        return soft
    }

    /// Connections to accept at most under the current soft limit.
    public static var connectionCap: Int { max(1, soft - reserved(forLimit: soft)) }

    #if canImport(Glibc)
    private static let resourceLimitNoFile = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)
    #else
    private static let resourceLimitNoFile = RLIMIT_NOFILE
    #endif
}
