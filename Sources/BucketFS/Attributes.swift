import Glibc

/// Builds the `stat` the kernel sees for a node: fixed modes, exact sizes, stored times.
struct Attributes: Sendable {
    let uid: uid_t
    let gid: gid_t

    static let fileMode: mode_t = S_IFREG | 0o644
    static let directoryMode: mode_t = S_IFDIR | 0o755
    static let symlinkMode: mode_t = S_IFLNK | 0o777
    static let readOnlyFileMode: mode_t = S_IFREG | 0o444
    static let readOnlyDirectoryMode: mode_t = S_IFDIR | 0o555
    static let blockSize = 4096

    func stat(for node: Node) -> Glibc.stat {
        var attributes = Glibc.stat()
        attributes.st_ino = ino_t(node.ino)
        // A file's kind is not made (its key, a string): `ls -l` asks this of every file.
        switch node.isFile ? nil : node.kind {
        case .root?, .bucket?, .group?:
            attributes.st_mode = Self.directoryMode
            attributes.st_nlink = 2
        case nil, .file?:
            attributes.st_mode = Self.fileMode
            // fstat of a descriptor whose name was unlinked or renamed over: no name is left.
            attributes.st_nlink = node.linked ? 1 : 0
        case .symlink(_, _, let target)?:
            attributes.st_mode = Self.symlinkMode
            attributes.st_nlink = 1
            attributes.st_size = Int(target.utf8.count)
        case .history(let path)?:
            attributes.st_mode = path.isDirectory ? Self.readOnlyDirectoryMode : Self.readOnlyFileMode
            attributes.st_nlink = path.isDirectory ? 2 : 1
            attributes.st_size = node.size
        }
        if let permissions = node.permissions, !node.isSymlink {
            attributes.st_mode = (attributes.st_mode & S_IFMT) | permissions
        }
        if node.isFile { attributes.st_size = node.size }
        if node.isDirectory { attributes.st_size = Self.blockSize }
        attributes.st_blksize = Self.blockSize
        attributes.st_blocks = (attributes.st_size + 511) / 512
        attributes.st_uid = uid
        attributes.st_gid = gid
        attributes.st_mtim = Self.timespec(node.mtime)
        attributes.st_atim = Self.timespec(node.atime ?? node.mtime)
        attributes.st_ctim = Self.timespec(node.ctime)
        return attributes
    }

    static func timespec(_ time: MountTime) -> Glibc.timespec {
        // Floor division: a time before 1970 still has 0 <= tv_nsec < 10^9.
        let (seconds, nanoseconds) = time.quotientAndRemainder(dividingBy: 1_000_000_000)
        return nanoseconds < 0
            ? Glibc.timespec(tv_sec: Int(seconds - 1), tv_nsec: Int(nanoseconds + 1_000_000_000))
            : Glibc.timespec(tv_sec: Int(seconds), tv_nsec: Int(nanoseconds))
    }

    /// Nanoseconds since the epoch cover the years 1678 to 2262; a time outside is clamped to
    /// that range (as ext4 clamps to its own), never an overflow trap on the request path.
    static func time(_ spec: Glibc.timespec) -> MountTime {
        let (seconds, overflow) = MountTime(spec.tv_sec).multipliedReportingOverflow(by: 1_000_000_000)
        if overflow { return spec.tv_sec < 0 ? MountTime.min : MountTime.max }
        let nanoseconds = MountTime(Swift.min(Swift.max(spec.tv_nsec, 0), 999_999_999))
        return seconds.addingReportingOverflow(nanoseconds).overflow ? MountTime.max : seconds + nanoseconds
    }

    static func now() -> MountTime {
        var spec = Glibc.timespec()
        clock_gettime(CLOCK_REALTIME, &spec)
        return time(spec)
    }
}
