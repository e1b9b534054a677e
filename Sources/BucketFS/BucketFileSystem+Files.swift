import CFuse
import Glibc

/// Files: all handles of an inode share one working copy; writes go to memory and are saved to
/// the store on flush, fsync and release (DESIGN.md: "never per write()").
extension BucketFileSystem {
    func open(_ request: FuseRequest, ino: UInt64, info: FileInfo) {
        let node = state.withLock { $0.table.node(ino) }
        guard let node else { return fail(request, .notFound) }
        guard case .file(let bucket, let item) = node.kind else {
            return fail(request, node.isDirectory ? .isDirectory : .invalidArgument)
        }
        let realIno = node.ino
        let truncate = info.flags & O_TRUNC != 0
        let opened = state.withLock { state -> UInt64? in
            var open = state.openFiles[realIno] ?? OpenFile()
            if truncate {
                // With FUSE_CAP_ATOMIC_O_TRUNC the truncation arrives here, not as a setattr.
                state.closedFiles.remove(realIno)
                open.truncate()
            } else if !open.loaded {
                guard let cached = state.closedFiles.take(realIno) else { return nil }
                open.load(cached, fresh: true)  // the cache holds only the store's bytes
            }
            open.handles += 1
            state.openFiles[realIno] = open
            // Seen at once (stat before the first write), as truncate(2) would show it.
            if truncate { state.workingCopyChanged(realIno) }
            return state.addHandle(.file(ino: realIno))
        }
        if let opened { return request.reply(open: opened, info: info.raw) }
        perform(request, on: readQueue) { [self] () throws(FSError) in
            let epoch = state.withLock { $0.remoteEpoch }
            let bytes = try backend.read(bucket: bucket, name: item)
            let handle = state.withLock { state -> UInt64 in
                var open = state.openFiles[realIno] ?? OpenFile()
                open.load(bytes, fresh: state.remoteEpoch == epoch)
                open.handles += 1
                state.openFiles[realIno] = open
                return state.addHandle(.file(ino: realIno))
            }
            request.reply(open: handle, info: info.raw)
        }
    }

    func read(_ request: FuseRequest, size: Int, offset: Int, handle: UInt64) {
        guard offset >= 0, size >= 0 else { return fail(request, .invalidArgument) }
        let result = state.withLock { state -> Result<ArraySlice<UInt8>?, FSError> in
            guard case .file(let ino)? = state.handles[handle] else { return .failure(.badHandle) }
            guard let open = state.openFiles[ino], open.loaded else { return .success(nil) }
            let start = min(offset, open.bytes.count)
            let end = min(start + size, open.bytes.count)
            return .success(open.bytes[start..<end])
        }
        switch result {
        case .failure(let error): fail(request, error)
        case .success(let slice?): request.reply(bytes: slice)
        case .success(nil):
            // A remote change replaced a clean working copy: fetch the new bytes first.
            perform(request, on: readQueue) { [self] () throws(FSError) in
                let slice = try reloadingWorkingCopy(handle: handle) { bytes in
                    let start = min(offset, bytes.count)
                    return bytes[start..<min(start + size, bytes.count)]
                }
                request.reply(bytes: slice)
            }
        }
    }

    func write(_ request: FuseRequest, bytes: UnsafeBufferPointer<UInt8>, offset: Int, handle: UInt64) {
        // Checked before anything is allocated: a write far past the end must not take the mount down.
        let count: Int
        do throws(FSError) { count = try writableCount(bytes.count, at: offset, limit: maxFileSize) } catch {
            if error == .fileTooLarge { logger.warning("write past the file size limit refused (EFBIG)", metadata: ["offset": "\(offset)"]) }
            return fail(request, error)
        }
        let data = UnsafeBufferPointer(rebasing: bytes[0..<count])
        let written = state.withLock { state -> Result<Bool, FSError> in
            guard case .file(let ino)? = state.handles[handle] else { return .failure(.badHandle) }
            guard state.openFiles[ino]?.loaded == true else { return .success(false) }
            state.openFiles[ino]?.write(data, at: offset)
            state.workingCopyChanged(ino)
            return .success(true)
        }
        switch written {
        case .failure(let error): fail(request, error)
        case .success(true): request.reply(written: count)
        case .success(false):
            let copy = Array(data)
            perform(request, on: readQueue) { [self] () throws(FSError) in
                _ = try reloadingWorkingCopy(handle: handle) { _ in [] }
                let done = state.withLock { state -> Bool in
                    guard case .file(let ino)? = state.handles[handle], state.openFiles[ino]?.loaded == true else {
                        return false
                    }
                    copy.withUnsafeBufferPointer { state.openFiles[ino]?.write($0, at: offset) }
                    state.workingCopyChanged(ino)
                    return true
                }
                guard done else { throw FSError.badHandle }
                request.reply(written: count)
            }
        }
    }

    /// close(2) waits for flush: the save is in the store (safe from a crash of this process)
    /// before close returns.
    func flush(_ request: FuseRequest, handle: UInt64) {
        saveHandle(request, handle: handle, release: false, sync: false)
    }

    /// fsync(2) also makes the save, and every change before it, survive a power loss.
    func fsync(_ request: FuseRequest, handle: UInt64) {
        saveHandle(request, handle: handle, release: false, sync: true)
    }

    func release(_ request: FuseRequest, handle: UInt64) {
        saveHandle(request, handle: handle, release: true, sync: false)
    }

    private func saveHandle(_ request: FuseRequest, handle: UInt64, release: Bool, sync: Bool) {
        let target = state.withLock { state -> (ino: UInt64, dirty: Bool)? in
            guard case .file(let ino)? = state.handles[handle] else { return nil }
            return (ino, state.openFiles[ino]?.dirty ?? false)
        }
        guard let target else { return fail(request, .badHandle) }
        if !target.dirty && !sync {
            // Nothing to save (and no save of it in flight: `dirty` clears only once one is done).
            if release { closeHandle(handle, ino: target.ino) }
            return request.replyOK()
        }
        perform(request, on: writeQueue) { [self] () throws(FSError) in
            defer { if release { closeHandle(handle, ino: target.ino) } }
            try saveIfDirty(target.ino)
            guard sync else { return request.replyOK() }
            try backend.sync()
            guard case .file(let bucket, .entity(let key))? = state.withLock({ $0.table.node(target.ino)?.kind }) else {
                return request.replyOK()
            }
            replyOnceAcknowledged(request, bucket: bucket, key: key)
        }
    }

    /// fsync with `MountOptions.serverAcknowledgement`: replies once the server has the changes,
    /// or EIO (with a log line) when it does not in time. The wait runs off the work queues, so
    /// no save or read of another file waits behind it.
    func replyOnceAcknowledged(_ request: FuseRequest, bucket: String, key: String?) {
        guard let (waiter, timeout) = acknowledgement else { return request.replyOK() }
        Task.detached { [self] in
            let outcome = await waiter.waitForServer(bucket: bucket, key: key, timeout: timeout)
            let what = "\(bucket)/\(key.map(FileNameCodec.fileName(forKey:)) ?? "")"
            switch outcome {
            case .acknowledged:
                request.replyOK()
            case .offline(let reason):
                logger.error("fsync of \(what) failed: offline (\(reason)); the change stays queued")
                request.reply(error: .io("offline"))
            case .notSendable(let reason):
                logger.error("fsync of \(what) failed: the server cannot have it (\(reason))")
                request.reply(error: .io("not sendable"))
            case .timedOut:
                logger.error("fsync of \(what) failed: no acknowledgement within \(timeout) s; the change stays queued")
                request.reply(error: .io("timed out"))
            }
        }
    }

    private func closeHandle(_ handle: UInt64, ino: UInt64) {
        state.withLock { state in
            guard state.handles.removeValue(forKey: handle) != nil, var open = state.openFiles[ino] else { return }
            open.handles -= 1
            state.putBack(open, of: ino)
        }
    }

    /// On `writeQueue`: writes the working copy to the store if it changed since the last save.
    /// A file unlinked meanwhile is not brought back.
    func saveIfDirty(_ ino: UInt64) throws(FSError) {
        let snapshot = state.withLock { state -> (bucket: String, item: MountItemName, bytes: [UInt8], generation: UInt64, time: MountTime?)? in
            guard let open = state.openFiles[ino], open.dirty, open.loaded else { return nil }
            guard let node = state.table.node(ino), node.linked, case .file(let bucket, let item) = node.kind else {
                state.openFiles[ino]?.dirty = false
                if let open = state.openFiles[ino], open.handles <= 0 { state.openFiles.removeValue(forKey: ino) }
                return nil
            }
            return (bucket, item, open.bytes, open.generation, open.pendingModificationTime)
        }
        guard let snapshot else { return }
        var entry = try backend.save(bucket: snapshot.bucket, name: snapshot.item, bytes: snapshot.bytes, newID: ino)
        if let time = snapshot.time {
            entry = try backend.setModificationTime(bucket: snapshot.bucket, name: snapshot.item, to: time)
        }
        state.withLock { state in
            if var open = state.openFiles[ino], open.generation == snapshot.generation {
                open.dirty = false
                open.pendingModificationTime = nil
                // The store now holds exactly these bytes (a remote change merged meanwhile
                // publishes its own event, which drops them again).
                open.cacheable = true
                state.putBack(open, of: ino)
            }
            if let node = state.table.node(ino) {
                state.table.updateAttributes(of: node.ino, size: entry.size, mtime: entry.mtime, ctime: entry.ctime)
            }
        }
    }

    func create(_ request: FuseRequest, parent: UInt64, name: String, mode: mode_t, info: FileInfo) {
        makeFile(request, parent: parent, name: name, mode: mode | S_IFREG, info: info)
    }

    /// Regular files only; devices, fifos and sockets have no place in a bucket.
    func mknod(_ request: FuseRequest, parent: UInt64, name: String, mode: mode_t) {
        guard mode & S_IFMT == S_IFREG || mode & S_IFMT == 0 else { return fail(request, .notPermitted) }
        makeFile(request, parent: parent, name: name, mode: S_IFREG, info: nil)
    }

    private func makeFile(_ request: FuseRequest, parent: UInt64, name: String, mode: mode_t, info: FileInfo?) {
        let item = FileNameCodec.itemName(forFileName: name)
        perform(request, on: writeQueue) { [self] () throws(FSError) in
            let bucket = try bucket(of: parent)
            try loadDirectory(parent)
            if let existing = state.withLock({ $0.table.child(of: parent, named: name) }) {
                // The kernel asks only after a negative lookup, but another process may have won.
                guard let info, info.flags & O_EXCL == 0, case .file = existing.kind else { throw FSError.exists }
                return reopen(request, ino: existing.ino, info: info)
            }
            let node: Node
            let inMemoryOnly: Bool
            if info != nil, case .localFile = item {
                // An editor's scratch file is created, written, fsynced and renamed at once: it
                // reaches the store at its first save (flush, fsync, rename or release), which
                // stores it under the number handed out here. Until then it has no bytes to lose.
                let now = Attributes.now()
                node = Node(
                    ino: try reservedID(), parent: parent, fileName: name, kind: .file(bucket: bucket, item: item),
                    size: 0, mtime: now, ctime: now)
                inMemoryOnly = true
            } else {
                node = Self.node(for: try backend.save(bucket: bucket, name: item, bytes: [], newID: nil), parent: parent)
                inMemoryOnly = false
            }
            let handle = state.withLock { state -> UInt64? in
                state.table.upsert(node)
                state.touchDirectory(parent)
                guard info != nil else { return nil }
                var open = state.openFiles[node.ino] ?? OpenFile()
                open.bytes = []
                open.loaded = true
                open.dirty = inMemoryOnly
                open.handles += 1
                state.openFiles[node.ino] = open
                return state.addHandle(.file(ino: node.ino))
            }
            let reply = try rememberedEntry(node.ino)
            if let info, let handle {
                // A write-only descriptor of a new file (`> file`, an editor's scratch file)
                // writes through, past the page cache: the kernel then skips the
                // security.capability lookup it makes before the first cached write to each new
                // inode, one round trip per file. Nothing is lost: it cannot be mmapped (that needs
                // read access), the only thing direct I/O refuses, and other descriptors of the
                // file still read through the cache, which direct writes invalidate.
                let writeOnly = info.flags & O_ACCMODE == O_WRONLY
                request.reply(create: reply, handle: handle, info: info.raw, directIO: writeOnly)
            } else {
                request.reply(entry: reply)
            }
        }
    }

    /// How many ids one reservation takes: one store write per this many scratch files.
    static let reservedIDBlock = 256

    /// The next number from the ids reserved for files created in memory (on `writeQueue`, the
    /// only place that takes them).
    private func reservedID() throws(FSError) -> UInt64 {
        if let id = state.withLock({ $0.takeReservedID() }) { return id }
        let ids = try backend.reserveIDs(count: Self.reservedIDBlock)
        state.withLock { $0.reservedIDs = (ids.lowerBound + 1)..<(ids.upperBound + 1) }
        return ids.lowerBound
    }

    /// create() on a name that appeared meanwhile: answer like open(), with an entry.
    private func reopen(_ request: FuseRequest, ino: UInt64, info: FileInfo) {
        do throws(FSError) {
            guard let node = state.withLock({ $0.table.node(ino) }), case .file(let bucket, let item) = node.kind else {
                throw FSError.notFound
            }
            let truncate = info.flags & O_TRUNC != 0
            let (epoch, inMemory) = state.withLock { ($0.remoteEpoch, $0.openFiles[ino]?.loaded ?? false) }
            // A working copy in memory is the file (one created in memory is not stored yet).
            let bytes = truncate || inMemory ? [] : try backend.read(bucket: bucket, name: item)
            let handle = state.withLock { state -> UInt64 in
                state.closedFiles.remove(ino)
                var open = state.openFiles[ino] ?? OpenFile()
                if truncate {
                    open.truncate()
                } else {
                    open.load(bytes, fresh: state.remoteEpoch == epoch)
                }
                open.handles += 1
                state.openFiles[ino] = open
                if truncate { state.workingCopyChanged(ino) }
                return state.addHandle(.file(ino: ino))
            }
            request.reply(create: try rememberedEntry(ino), handle: handle, info: info.raw, directIO: false)
        } catch {
            fail(request, error)
        }
    }

    /// On `writeQueue`, before a name stops leading to `node` (unlink, rename over it): a
    /// descriptor still open on it reads on the bytes it had (POSIX), so a working copy that a
    /// remote change emptied is loaded now, while the name still holds them.
    func keepWorkingCopy(of node: Node) throws(FSError) {
        guard case .file(let bucket, let item) = node.kind,
            state.withLock({ $0.openFiles[node.ino].map { !$0.loaded } ?? false })
        else { return }
        let bytes = try backend.read(bucket: bucket, name: item)
        state.withLock { $0.openFiles[node.ino]?.load(bytes, fresh: false) }
    }

    /// Loads the store's bytes into a handle's working copy if a remote change emptied it.
    private func reloadingWorkingCopy<T>(handle: UInt64, _ body: ([UInt8]) -> T) throws(FSError) -> T {
        let target = state.withLock { state -> (UInt64, Node)? in
            guard case .file(let ino)? = state.handles[handle], let node = state.table.node(ino) else { return nil }
            return (ino, node)
        }
        guard let (ino, node) = target, case .file(let bucket, let item) = node.kind else { throw FSError.badHandle }
        // A file without a name has nothing in the store to load: its bytes went with the name.
        guard node.linked else { throw FSError.notFound }
        let epoch = state.withLock { $0.remoteEpoch }
        let bytes = try backend.read(bucket: bucket, name: item)
        return state.withLock { state -> T in
            var open = state.openFiles[ino] ?? OpenFile()
            open.load(bytes, fresh: state.remoteEpoch == epoch)
            state.openFiles[ino] = open
            return body(open.bytes)
        }
    }

}
