import CFuse
import Glibc

/// The C callback table: each entry turns raw arguments into Swift values and forwards to one
/// `BucketFileSystem` method, which replies exactly once. Kept out of any `main.swift`: top-level
/// code there is main-actor isolated and would trap when libfuse calls it from its threads.
enum FuseCallbacks {
    static func fileSystem(_ request: fuse_req_t?) -> (BucketFileSystem, FuseRequest)? {
        guard let request, let userData = fuse_req_userdata(request) else { return nil }
        return (Unmanaged<BucketFileSystem>.fromOpaque(userData).takeUnretainedValue(), FuseRequest(raw: request))
    }

    static func name(_ pointer: UnsafePointer<CChar>?) -> String? {
        guard let pointer else { return nil }
        return String(validatingCString: pointer)
    }

    /// Names that are not valid UTF-8 cannot be store keys or local names.
    static func withName(_ request: FuseRequest, _ pointer: UnsafePointer<CChar>?, _ body: (String) -> Void) {
        guard let text = name(pointer) else { return request.reply(error: .invalidArgument) }
        guard text.utf8.count <= 255 else { return request.reply(error: .nameTooLong) }
        body(text)
    }

    static func operations() -> fuse_lowlevel_ops {
        var ops = fuse_lowlevel_ops()
        ops.`init` = { _, connection in
            guard let connection else { return }
            // open(O_TRUNC) arrives as one open instead of setattr(size 0) + open, so a truncating
            // rewrite is one save, not an empty save followed by the real one.
            cfuse_conn_want(connection, UInt32(FUSE_CAP_ATOMIC_O_TRUNC))
        }
        ops.lookup = { request, parent, name in
            guard let (fs, request) = FuseCallbacks.fileSystem(request) else { return }
            FuseCallbacks.withName(request, name) { fs.lookup(request, parent: parent, name: $0) }
        }
        ops.forget = { request, ino, count in
            guard let (fs, request) = FuseCallbacks.fileSystem(request) else { return }
            fs.forget(request, ino: ino, count: count)
        }
        ops.forget_multi = { request, count, items in
            guard let (fs, request) = FuseCallbacks.fileSystem(request) else { return }
            let list = (0..<count).compactMap { index -> (ino: UInt64, count: UInt64)? in
                guard let item = items?[index] else { return nil }
                return (item.ino, item.nlookup)
            }
            fs.forgetMulti(request, items: list)
        }
        ops.getattr = { request, ino, _ in
            guard let (fs, request) = FuseCallbacks.fileSystem(request) else { return }
            fs.getattr(request, ino: ino)
        }
        ops.setattr = { request, ino, attributes, fields, _ in
            guard let (fs, request) = FuseCallbacks.fileSystem(request) else { return }
            guard let attributes else { return request.reply(error: .invalidArgument) }
            fs.setattr(request, ino: ino, attributes: attributes.pointee, fields: fields)
        }
        ops.readlink = { request, ino in
            guard let (fs, request) = FuseCallbacks.fileSystem(request) else { return }
            fs.readlink(request, ino: ino)
        }
        ops.mknod = { request, parent, name, mode, _ in
            guard let (fs, request) = FuseCallbacks.fileSystem(request) else { return }
            FuseCallbacks.withName(request, name) { fs.mknod(request, parent: parent, name: $0, mode: mode) }
        }
        ops.mkdir = { request, parent, name, _ in
            guard let (fs, request) = FuseCallbacks.fileSystem(request) else { return }
            FuseCallbacks.withName(request, name) { fs.mkdir(request, parent: parent, name: $0) }
        }
        ops.unlink = { request, parent, name in
            guard let (fs, request) = FuseCallbacks.fileSystem(request) else { return }
            FuseCallbacks.withName(request, name) { fs.unlink(request, parent: parent, name: $0) }
        }
        ops.rmdir = { request, parent, name in
            guard let (fs, request) = FuseCallbacks.fileSystem(request) else { return }
            FuseCallbacks.withName(request, name) { fs.rmdir(request, parent: parent, name: $0) }
        }
        ops.symlink = { request, link, parent, name in
            guard let (fs, request) = FuseCallbacks.fileSystem(request) else { return }
            guard let target = FuseCallbacks.name(link) else { return request.reply(error: .invalidArgument) }
            FuseCallbacks.withName(request, name) { fs.symlink(request, target: target, parent: parent, name: $0) }
        }
        ops.rename = { request, parent, name, newParent, newName, flags in
            guard let (fs, request) = FuseCallbacks.fileSystem(request) else { return }
            FuseCallbacks.withName(request, name) { source in
                FuseCallbacks.withName(request, newName) { destination in
                    fs.rename(request, parent: parent, name: source, newParent: newParent, newName: destination, flags: flags)
                }
            }
        }
        ops.link = { request, _, _, _ in
            guard let (_, request) = FuseCallbacks.fileSystem(request) else { return }
            request.reply(error: .notPermitted)
        }
        ops.open = { request, ino, info in
            guard let (fs, request) = FuseCallbacks.fileSystem(request) else { return }
            fs.open(request, ino: ino, info: FileInfo(info))
        }
        ops.read = { request, _, size, offset, info in
            guard let (fs, request) = FuseCallbacks.fileSystem(request) else { return }
            fs.read(request, size: size, offset: offset, handle: info?.pointee.fh ?? 0)
        }
        ops.write = { request, _, buffer, size, offset, info in
            guard let (fs, request) = FuseCallbacks.fileSystem(request) else { return }
            let bytes = UnsafeBufferPointer(start: UnsafeRawPointer(buffer)?.assumingMemoryBound(to: UInt8.self), count: size)
            fs.write(request, bytes: bytes, offset: offset, handle: info?.pointee.fh ?? 0)
        }
        ops.flush = { request, _, info in
            guard let (fs, request) = FuseCallbacks.fileSystem(request) else { return }
            fs.flush(request, handle: info?.pointee.fh ?? 0)
        }
        ops.release = { request, _, info in
            guard let (fs, request) = FuseCallbacks.fileSystem(request) else { return }
            fs.release(request, handle: info?.pointee.fh ?? 0)
        }
        ops.fsync = { request, _, _, info in
            guard let (fs, request) = FuseCallbacks.fileSystem(request) else { return }
            fs.fsync(request, handle: info?.pointee.fh ?? 0)
        }
        ops.opendir = { request, ino, info in
            guard let (fs, request) = FuseCallbacks.fileSystem(request) else { return }
            fs.opendir(request, ino: ino, info: FileInfo(info))
        }
        ops.readdir = { request, _, size, offset, info in
            guard let (fs, request) = FuseCallbacks.fileSystem(request) else { return }
            fs.readdir(request, size: size, offset: offset, handle: info?.pointee.fh ?? 0)
        }
        ops.readdirplus = { request, _, size, offset, info in
            guard let (fs, request) = FuseCallbacks.fileSystem(request) else { return }
            fs.readdirplus(request, size: size, offset: offset, handle: info?.pointee.fh ?? 0)
        }
        ops.releasedir = { request, _, info in
            guard let (fs, request) = FuseCallbacks.fileSystem(request) else { return }
            fs.releasedir(request, handle: info?.pointee.fh ?? 0)
        }
        ops.fsyncdir = { request, ino, _, _ in
            guard let (fs, request) = FuseCallbacks.fileSystem(request) else { return }
            fs.fsyncdir(request, ino: ino)
        }
        ops.statfs = { request, ino in
            guard let (fs, request) = FuseCallbacks.fileSystem(request) else { return }
            fs.statfs(request, ino: ino)
        }
        ops.setxattr = { request, ino, _, _, _, _ in
            guard let (fs, request) = FuseCallbacks.fileSystem(request) else { return }
            fs.setxattr(request, ino: ino)
        }
        ops.getxattr = { request, ino, name, size in
            guard let (fs, request) = FuseCallbacks.fileSystem(request) else { return }
            FuseCallbacks.withName(request, name) { fs.getxattr(request, ino: ino, name: $0, size: size) }
        }
        ops.listxattr = { request, ino, size in
            guard let (fs, request) = FuseCallbacks.fileSystem(request) else { return }
            fs.listxattr(request, ino: ino, size: size)
        }
        ops.removexattr = { request, _, _ in
            guard let (fs, request) = FuseCallbacks.fileSystem(request) else { return }
            fs.removexattr(request)
        }
        ops.create = { request, parent, name, mode, info in
            guard let (fs, request) = FuseCallbacks.fileSystem(request) else { return }
            FuseCallbacks.withName(request, name) { fs.create(request, parent: parent, name: $0, mode: mode, info: FileInfo(info)) }
        }
        return ops
    }
}
