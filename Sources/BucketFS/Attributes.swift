import Glibc

/// Builds the `stat` the kernel sees for a node: fixed modes, exact sizes, stored times.
struct Attributes: Sendable {
    let uid: uid_t
    let gid: gid_t

    static let fileMode: mode_t = S_IFREG | 0o644
    static let directoryMode: mode_t = S_IFDIR | 0o755
    static let symlinkMode: mode_t = S_IFLNK | 0o777
    static let blockSize = 4096

    func stat(for node: Node) -> Glibc.stat {
        var attributes = Glibc.stat()
        attributes.st_ino = ino_t(node.ino)
        switch node.kind {
        case .root, .bucket:
            attributes.st_mode = Self.directoryMode
            attributes.st_nlink = 2
        case .file:
            attributes.st_mode = Self.fileMode
            attributes.st_nlink = 1
        case .symlink(_, _, let target):
            attributes.st_mode = Self.symlinkMode
            attributes.st_nlink = 1
            attributes.st_size = Int(target.utf8.count)
        }
        if case .file = node.kind { attributes.st_size = node.size }
        if node.isDirectory { attributes.st_size = Self.blockSize }
        attributes.st_blksize = Self.blockSize
        attributes.st_blocks = (attributes.st_size + 511) / 512
        attributes.st_uid = uid
        attributes.st_gid = gid
        attributes.st_mtim = Self.timespec(node.mtime)
        attributes.st_atim = Self.timespec(node.mtime)
        attributes.st_ctim = Self.timespec(node.ctime)
        return attributes
    }

    static func timespec(_ time: MountTime) -> Glibc.timespec {
        Glibc.timespec(tv_sec: Int(time / 1_000_000_000), tv_nsec: Int(time % 1_000_000_000))
    }

    static func time(_ spec: Glibc.timespec) -> MountTime {
        MountTime(spec.tv_sec) * 1_000_000_000 + MountTime(spec.tv_nsec)
    }

    static func now() -> MountTime {
        var spec = Glibc.timespec()
        clock_gettime(CLOCK_REALTIME, &spec)
        return time(spec)
    }
}
