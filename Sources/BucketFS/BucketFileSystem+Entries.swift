import CFuse
import Glibc

/// Names and attributes: lookup, forget, getattr, setattr, readlink, statfs.
extension BucketFileSystem {
    func lookup(_ request: FuseRequest, parent: UInt64, name: String) {
        withLoadedDirectory(request, parent) { [self] () throws(FSError) in
            let child = state.withLock { $0.table.child(of: parent, named: name) }
            guard let child else {
                if historyPath(parent) != nil { return lookupInHistory(request, parent: parent, name: name) }
                // A bucket made by another client since the root (or its group) was listed.
                if bucketParent(parent) != nil, FileNameCodec.decode(name) != nil {
                    perform(request, on: writeQueue) { [self] () throws(FSError) in
                        try loadDirectory(parent, refresh: true)
                        guard let found = state.withLock({ $0.table.child(of: parent, named: name) }) else {
                            throw FSError.notFound
                        }
                        request.reply(entry: try rememberedEntry(found.ino))
                    }
                    return
                }
                // Debug: which names the kernel was told are not there (the sync-model test's
                // rename that answered ENOENT yet moved the file, issue 34).
                logger.debug("lookup: no such name", metadata: ["parent": "\(parent)", "name": "\(name)"])
                throw FSError.notFound
            }
            request.reply(entry: try rememberedEntry(child.ino))
        }
    }

    func forget(_ request: FuseRequest, ino: UInt64, count: UInt64) {
        forgetMulti(request, items: [(ino, count)])
    }

    func forgetMulti(_ request: FuseRequest, items: [(ino: UInt64, count: UInt64)]) {
        let (overdrawn, released) = state.withLock { state in
            // Directories where the kernel now holds nothing: their listings may leave memory.
            var released: Set<UInt64> = []
            let overdrawn = items.filter { item in
                let parent = state.table.record(item.ino)?.parent
                let honest = state.table.forget(item.ino, count: item.count)
                state.forgetFileRecords(of: item.ino)
                if let parent, parent != item.ino, !state.table.holdsReferences(in: parent) { released.insert(parent) }
                return !honest
            }
            return (overdrawn, released)
        }
        for item in overdrawn {
            logger.error("the kernel forgot an inode more often than it was handed it", metadata: ["ino": "\(item.ino)", "count": "\(item.count)"])
        }
        request.replyNone()
        for directory in released { releaseListing(of: directory) }
    }

    func getattr(_ request: FuseRequest, ino: UInt64) {
        let node = state.withLock { $0.currentNode(ino) }
        guard let node else { return fail(request, .notFound) }
        var attributes = attributes.stat(for: node)
        attributes.st_ino = ino_t(ino)
        request.reply(attributes: attributes, timeout: cacheTimeout)
    }

    /// chmod sets permission bits, chown only to the current owner (else EPERM); truncate edits
    /// the open buffer or saves at once; times are stored (rsync -a relies on them). A file's
    /// permission bits and access time are stored with it (local metadata, never sent); a
    /// directory's and a lock link's live for the mount's life.
    func setattr(_ request: FuseRequest, ino: UInt64, attributes wanted: stat, fields: Int32) {
        let node = state.withLock { $0.currentNode(ino) }
        guard let node else { return fail(request, .notFound) }
        let current = attributes.stat(for: node)
        // `chmod +x`, `install -m`, rsync's mkstemp fchmod to 0600 all behave; setuid, setgid
        // and sticky bits are refused.
        let newMode: mode_t? = fields & FUSE_SET_ATTR_MODE != 0 ? wanted.st_mode & 0o7777 : nil
        if let newMode, newMode & 0o7000 != 0 { return fail(request, .notPermitted) }
        if fields & FUSE_SET_ATTR_UID != 0, wanted.st_uid != current.st_uid { return fail(request, .notPermitted) }
        if fields & FUSE_SET_ATTR_GID != 0, wanted.st_gid != current.st_gid { return fail(request, .notPermitted) }
        let newSize: Int? = fields & FUSE_SET_ATTR_SIZE != 0 ? wanted.st_size : nil
        let newTime = Self.requestedTime(fields, now: FUSE_SET_ATTR_MTIME_NOW, given: FUSE_SET_ATTR_MTIME, wanted.st_mtim)
        let newAccessTime = Self.requestedTime(fields, now: FUSE_SET_ATTR_ATIME_NOW, given: FUSE_SET_ATTR_ATIME, wanted.st_atim)
        if newSize == nil && newTime == nil && newMode == nil && newAccessTime == nil {
            var reply = current
            reply.st_ino = ino_t(ino)
            return request.reply(attributes: reply, timeout: cacheTimeout)
        }
        if case .history = node.kind { return fail(request, .readOnly) }
        guard case .file(let bucket, let item) = node.kind else {
            // A size on a directory or lock link is meaningless. Their times live in memory.
            if newSize != nil { return fail(request, node.isDirectory ? .isDirectory : .invalidArgument) }
            let updated = state.withLock { state -> Node? in
                if let newMode { state.table.setPermissions(of: node.ino, to: newMode) }
                if let newAccessTime { state.table.setTimes(of: node.ino, atime: newAccessTime) }
                if let newTime {
                    if node.isDirectory {
                        state.directoryTimes[node.ino] = (newTime, Attributes.now())
                    } else {
                        state.table.setTimes(of: node.ino, atime: nil, mtime: newTime, ctime: Attributes.now())
                    }
                }
                return state.currentNode(node.ino)
            }
            var reply = attributes.stat(for: updated ?? node)
            reply.st_ino = ino_t(ino)
            return request.reply(attributes: reply, timeout: cacheTimeout)
        }
        if let newSize, newSize < 0 { return fail(request, .invalidArgument) }
        if let newSize, newSize > sizeLimit(of: item) {
            logger.warning("truncate past the file size limit refused (EFBIG)", metadata: ["size": "\(newSize)"])
            return fail(request, .fileTooLarge)
        }
        let realIno = node.ino
        performOnWriteQueue(request, savingFirst: newMode != nil || newAccessTime != nil ? realIno : nil) { [self] () throws(FSError) in
            if let newSize { try truncate(realIno, bucket: bucket, item: item, to: newSize) }
            if let newTime { try setModificationTime(realIno, bucket: bucket, item: item, to: newTime) }
            if newMode != nil || newAccessTime != nil {
                // A file made in memory reaches the store first (rsync fchmods its empty temp file).
                try saveIfDirty(realIno)
                let entry = try backend.setAttributes(
                    bucket: bucket, name: item, permissions: newMode.map { Int($0 & 0o777) }, atime: newAccessTime)
                state.withLock { state in
                    if let newMode { state.table.setPermissions(of: realIno, to: newMode) }
                    state.table.setTimes(of: realIno, atime: newAccessTime, ctime: entry.ctime)
                }
            }
            guard let updated = state.withLock({ $0.currentNode(realIno) }) else { throw FSError.notFound }
            var reply = attributes.stat(for: updated)
            reply.st_ino = ino_t(ino)
            request.reply(attributes: reply, timeout: cacheTimeout)
        }
    }

    /// The time a setattr asks for (utimensat's UTIME_NOW, a given time, or UTIME_OMIT).
    private static func requestedTime(_ fields: Int32, now: Int32, given: Int32, _ spec: timespec) -> MountTime? {
        if fields & now != 0 { return Attributes.now() }
        if fields & given != 0 { return Attributes.time(spec) }
        return nil
    }

    /// On `writeQueue`: resize the open working copy, or resize a closed file in the store.
    private func truncate(_ ino: UInt64, bucket: String, item: MountItemName, to size: Int) throws(FSError) {
        let directory = backend.scratchDirectory
        let threshold = spillThreshold
        // Each round makes progress (a copy out of the store, or a replaced spill file).
        for _ in 0..<4 {
            let step = state.withLock { state -> Result<TruncateStep, FSError> in
                guard var open = state.openFiles[ino], open.loaded else { return .success(.closed) }
                if open.stored != nil { return .success(.copyStored) }
                if open.spill == nil, size > threshold {
                    do throws(FSError) { try open.spillBytes(into: directory) } catch { return .failure(error) }
                    state.openFiles[ino] = open
                }
                if let spill = open.spill { return .success(.spilled(spill)) }
                state.openFiles[ino]?.resize(to: size)
                state.workingCopyChanged(ino)
                return .success(.done)
            }
            switch step {
            case .failure(let error): throw error
            case .success(.done): return
            case .success(.closed): return try truncateClosed(ino, bucket: bucket, item: item, to: size)
            case .success(.copyStored): try copyStoredContent(of: ino, upTo: size)
            case .success(.spilled(let spill)):
                let done = try spill.withLock { () throws(FSError) -> Bool in
                    try spill.resize(to: size)
                    return spilled(spill, of: ino, changedTo: size)
                }
                if done { return }
            }
        }
        throw FSError.io("the working copy kept changing during a truncate")
    }

    private enum TruncateStep {
        case done
        case closed
        case copyStored
        case spilled(SpillFile)
    }

    /// A file no descriptor holds: a local file is resized in the store without reading it; an
    /// entity's (bounded) bytes are loaded, resized and saved.
    private func truncateClosed(_ ino: UInt64, bucket: String, item: MountItemName, to size: Int) throws(FSError) {
        state.withLock { $0.closedFiles.remove(ino) }
        let entry: MountSavedFile
        if case .localFile(let name) = item {
            entry = MountSavedFile(try backend.resizeLocalFile(bucket: bucket, name: name, to: size))
        } else {
            var file = OpenFile()
            file.load(try backend.read(bucket: bucket, name: item), fresh: false)
            file.resize(to: size)
            entry = try backend.save(bucket: bucket, name: item, bytes: file.bytes, newID: nil)
        }
        state.withLock { $0.table.updateAttributes(of: ino, size: entry.size, mtime: entry.mtime, ctime: entry.ctime) }
    }

    /// On `writeQueue`: store the time now, or after the pending save of a dirty buffer.
    private func setModificationTime(_ ino: UInt64, bucket: String, item: MountItemName, to time: MountTime) throws(FSError) {
        let deferred = state.withLock { state -> Bool in
            guard var open = state.openFiles[ino], open.dirty else { return false }
            open.pendingModificationTime = time
            state.openFiles[ino] = open
            state.table.updateAttributes(
                of: ino, size: open.size, mtime: time, ctime: state.table.node(ino)?.ctime ?? time)
            return true
        }
        if deferred { return }
        let entry = try backend.setModificationTime(bucket: bucket, name: item, to: time)
        state.withLock { $0.table.updateAttributes(of: ino, size: entry.size, mtime: entry.mtime, ctime: entry.ctime) }
    }

    func readlink(_ request: FuseRequest, ino: UInt64) {
        let node = state.withLock { $0.table.node(ino) }
        guard let node else { return fail(request, .notFound) }
        guard case .symlink(_, _, let target) = node.kind else { return fail(request, .invalidArgument) }
        request.reply(link: target)
    }

    func statfs(_ request: FuseRequest, ino: UInt64) {
        let count = state.withLock { $0.table.nodes.count }
        var result = statvfs()
        result.f_bsize = UInt(Attributes.blockSize)
        result.f_frsize = UInt(Attributes.blockSize)
        result.f_blocks = 1 << 28
        result.f_bfree = 1 << 28
        result.f_bavail = 1 << 28
        result.f_files = fsfilcnt_t(count) + (1 << 24)
        result.f_ffree = 1 << 24
        result.f_favail = 1 << 24
        result.f_namemax = 255
        request.reply(statfs: result)
    }
}
