import Glibc

/// Why a file-system operation failed; `errno` is the only place these become error numbers.
public enum FSError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The name or inode does not exist.
    case notFound
    /// The name already exists (mkdir of an existing bucket, RENAME_NOREPLACE, O_EXCL).
    case exists
    /// A directory was given where a file is needed.
    case isDirectory
    /// A file was given where a directory is needed.
    case notDirectory
    /// rmdir of a bucket that still holds files.
    case notEmpty
    /// Busy for now: rmdir of a bucket whose removals the server has not confirmed yet.
    case busy
    /// The layout forbids it (files at the root, subdirectories in a bucket, chmod to another mode).
    case notPermitted
    /// Not supported by this file system (setxattr, removexattr, RENAME_EXCHANGE flags).
    case notSupported
    /// The argument is malformed (a bucket name that is not canonically encoded, unknown flags).
    case invalidArgument
    /// The xattr does not exist on this node.
    case noAttribute
    /// The caller's buffer is too small for the reply.
    case range
    /// A name longer than the kernel allows.
    case nameTooLong
    /// rename between buckets: `mv` then copies and removes, one entity at a time.
    case crossDevice
    /// A stale handle: the file handle is not open.
    case badHandle
    /// The disk holding the store is full: nothing was written (the editor keeps its buffer).
    case noSpace
    /// A write or truncate past the mount's file size limit (`MountOptions.maxFileSize`).
    case fileTooLarge
    /// The store failed (SQLite error, corrupt row); the message goes to the log.
    case io(String)
    /// A change to the read-only `.history` view.
    case readOnly

    /// The errno the kernel receives for this error.
    public var errno: Int32 {
        switch self {
        case .notFound: return ENOENT
        case .exists: return EEXIST
        case .isDirectory: return EISDIR
        case .notDirectory: return ENOTDIR
        case .notEmpty: return ENOTEMPTY
        case .busy: return EBUSY
        case .notPermitted: return EPERM
        case .notSupported: return ENOTSUP
        case .invalidArgument: return EINVAL
        case .noAttribute: return ENODATA
        case .range: return ERANGE
        case .nameTooLong: return ENAMETOOLONG
        case .crossDevice: return EXDEV
        case .badHandle: return EBADF
        case .noSpace: return ENOSPC
        case .fileTooLarge: return EFBIG
        case .io: return EIO
        case .readOnly: return EROFS
        }
    }

    public var description: String {
        switch self {
        case .notFound: return "no such file"
        case .exists: return "file exists"
        case .isDirectory: return "is a directory"
        case .notDirectory: return "not a directory"
        case .notEmpty: return "directory not empty"
        case .busy: return "waiting for the server"
        case .notPermitted: return "operation not permitted"
        case .notSupported: return "operation not supported"
        case .invalidArgument: return "invalid argument"
        case .noAttribute: return "no such attribute"
        case .range: return "buffer too small"
        case .nameTooLong: return "name too long"
        case .crossDevice: return "rename across buckets"
        case .badHandle: return "bad file handle"
        case .noSpace: return "no space left on the store's disk"
        case .fileTooLarge: return "file too large"
        case .io(let message): return "I/O error: \(message)"
        case .readOnly: return "read-only file system"
        }
    }
}
