import CFuse
import Glibc

/// A FUSE request that may be answered from any thread (libfuse allows `fuse_reply_*` anywhere),
/// exactly once. The raw pointer stays valid until that reply.
struct FuseRequest: @unchecked Sendable {
    let raw: fuse_req_t

    func reply(error: FSError) {
        _ = fuse_reply_err(raw, error.errno)
    }

    func replyOK() {
        _ = fuse_reply_err(raw, 0)
    }

    func replyNone() {
        fuse_reply_none(raw)
    }

    func reply(entry: EntryReply) {
        var parameter = entry.parameter
        _ = fuse_reply_entry(raw, &parameter)
    }

    func reply(attributes: stat, timeout: Double) {
        var attributes = attributes
        _ = fuse_reply_attr(raw, &attributes, timeout)
    }

    /// `directIO`: the kernel reads through to the file system, past the size it caches.
    /// `keepCache`: the kernel keeps the pages it cached of the file (else it drops them).
    /// A descriptor that only reads is closed without a flush (`FOPEN_NOFLUSH`): it has nothing
    /// to save, and `grep -r` or `cat` closes each file without waiting for a round trip.
    func reply(open handle: UInt64, info: fuse_file_info, directIO: Bool = false, keepCache: Bool = false) {
        var info = info
        info.fh = handle
        cfuse_file_info_set_keep_cache(&info, keepCache ? 1 : 0)
        if !FileInfo(info).writes { cfuse_file_info_set_noflush(&info, 1) }
        if directIO { cfuse_file_info_set_direct_io(&info, 1) }
        _ = fuse_reply_open(raw, &info)
    }

    func reply(openDirectory handle: UInt64, info: fuse_file_info, keepCache: Bool) {
        var info = info
        info.fh = handle
        cfuse_file_info_set_cache_readdir(&info, 1)
        cfuse_file_info_set_keep_cache(&info, keepCache ? 1 : 0)
        _ = fuse_reply_open(raw, &info)
    }

    func reply(create entry: EntryReply, handle: UInt64, info: fuse_file_info, directIO: Bool) {
        var parameter = entry.parameter
        var info = info
        info.fh = handle
        cfuse_file_info_set_keep_cache(&info, 0)
        cfuse_file_info_set_direct_io(&info, directIO ? 1 : 0)
        _ = fuse_reply_create(raw, &parameter, &info)
    }

    func reply(bytes: ArraySlice<UInt8>) {
        _ = bytes.withUnsafeBytes { buffer in
            fuse_reply_buf(raw, buffer.baseAddress?.assumingMemoryBound(to: CChar.self), buffer.count)
        }
    }

    func reply(written count: Int) {
        _ = fuse_reply_write(raw, count)
    }

    func reply(link target: String) {
        _ = target.withCString { fuse_reply_readlink(raw, $0) }
    }

    func reply(xattrSize size: Int) {
        _ = fuse_reply_xattr(raw, size)
    }

    func reply(statfs: statvfs) {
        var statfs = statfs
        _ = fuse_reply_statfs(raw, &statfs)
    }
}

/// A lookup-style answer: the inode, its attributes and how long the kernel may cache them.
struct EntryReply: Sendable {
    let ino: UInt64
    let attributes: stat
    let timeout: Double

    var parameter: fuse_entry_param {
        var parameter = fuse_entry_param()
        parameter.ino = ino
        parameter.generation = 1
        parameter.attr = attributes
        parameter.attr_timeout = timeout
        parameter.entry_timeout = timeout
        return parameter
    }
}

/// A copy of the request's `fuse_file_info` (the kernel's pointer is only valid in the handler).
struct FileInfo: @unchecked Sendable {
    var raw: fuse_file_info

    init(_ pointer: UnsafeMutablePointer<fuse_file_info>?) {
        raw = pointer?.pointee ?? fuse_file_info()
    }

    init(_ raw: fuse_file_info) {
        self.raw = raw
    }

    var handle: UInt64 { raw.fh }
    var flags: Int32 { raw.flags }
    /// Opened to change the file: for writing, or truncated.
    var writes: Bool { flags & O_ACCMODE != O_RDONLY || flags & O_TRUNC != 0 }
}
