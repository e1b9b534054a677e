import Glibc

/// Read-only xattrs of entities: `user.bucketfs.key|version|state` (DESIGN.md); a local file's
/// state is `local`. Other `user.` names are ENODATA; names of other namespaces (`security.`,
/// `system.`, `trusted.`) ENOTSUP, as a local file system without that namespace answers; set
/// and remove are ENOTSUP. Never ENOSYS: the kernel would stop asking for good.
extension BucketFileSystem {
    static let keyAttribute = "user.bucketfs.key"
    static let versionAttribute = "user.bucketfs.version"
    static let stateAttribute = "user.bucketfs.state"

    func getxattr(_ request: FuseRequest, ino: UInt64, name: String, size: Int) {
        // `ls -l` asks each file for `security.selinux` and `system.posix_acl_access`, and the
        // kernel caches no answer: two round trips per file (2,000,000 for a bucket of a
        // million notes, ~150 s here; issue 40). ENOTSUP tells ls the file system has no such
        // namespace, and it asks no other file on it (coreutils' per-device cache).
        guard name.utf8.starts(with: "user.".utf8) else { return fail(request, .notSupported) }
        guard [Self.keyAttribute, Self.versionAttribute, Self.stateAttribute].contains(name) else {
            return fail(request, .noAttribute)
        }
        perform(request, on: readQueue) { [self] () throws(FSError) in
            let attributes = try entityAttributes(ino)
            guard let value = attributes.first(where: { $0.name == name })?.value else { throw FSError.noAttribute }
            try replyXattr(request, Array(value.utf8), size: size)
        }
    }

    func listxattr(_ request: FuseRequest, ino: UInt64, size: Int) {
        perform(request, on: readQueue) { [self] () throws(FSError) in
            var names: [UInt8] = []
            for attribute in try entityAttributes(ino) {
                names += Array(attribute.name.utf8)
                names.append(0)
            }
            try replyXattr(request, names, size: size)
        }
    }

    func setxattr(_ request: FuseRequest, ino: UInt64) {
        fail(request, historyPath(ino) == nil ? .notSupported : .readOnly)
    }

    func removexattr(_ request: FuseRequest) {
        fail(request, .notSupported)
    }

    /// Size 0 asks for the length; a smaller buffer than the value is ERANGE (getxattr(2)).
    private func replyXattr(_ request: FuseRequest, _ value: [UInt8], size: Int) throws(FSError) {
        if size == 0 { return request.reply(xattrSize: value.count) }
        guard size >= value.count else { throw FSError.range }
        request.reply(bytes: value[...])
    }

    /// The entity's xattrs, fresh from the store (the state changes when the server acknowledges).
    private func entityAttributes(_ ino: UInt64) throws(FSError) -> [(name: String, value: String)] {
        guard let node = state.withLock({ $0.table.node(ino) }) else { throw FSError.notFound }
        // A file kept on this device only (a scratch file, `100%.json`) says so, as `bucketfs status` does.
        if case .file(_, .localFile) = node.kind { return [(Self.stateAttribute, "local")] }
        guard case .file(let bucket, .entity(let key)) = node.kind else { return [] }
        guard let status = try backend.status(bucket: bucket, key: key) else { return [] }
        var result = [(name: Self.keyAttribute, value: status.key)]
        if let version = status.version { result.append((Self.versionAttribute, String(version))) }
        result.append((Self.stateAttribute, status.state))
        return result
    }
}
