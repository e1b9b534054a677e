import CFuse
import Glibc

/// Files: all handles of an inode share one working copy; writes go to memory and are saved to
/// the store on flush, fsync and release (DESIGN.md: "never per write()").
extension BucketFileSystem {
    func open(_ request: FuseRequest, ino: UInt64, info: FileInfo) {
        let node = state.withLock { $0.table.node(ino) }
        guard let node else { return fail(request, .notFound) }
        if case .history(let path) = node.kind { return openHistory(request, node: node, path: path, info: info) }
        guard case .file(let bucket, let item) = node.kind else {
            return fail(request, node.isDirectory ? .isDirectory : .invalidArgument)
        }
        let realIno = node.ino
        // A file changed from elsewhere, or a number the kernel holds for a name whose file is
        // now another (`InodeTable.alias`): until the notice on its way lands, the kernel may
        // cache the old size, and would cut reads there (a read neither old nor new). Read
        // through to the file instead. So too when the bytes opened are not of the size the
        // kernel was last told (a change from elsewhere the store holds and the tree not yet).
        let readThrough = realIno != ino || kernelMayHoldAnOldSize(of: ino)
        let truncate = info.flags & O_TRUNC != 0
        if info.writes { backend.openedForWriting(bucket: bucket, name: item) }
        let opened = state.withLock { state -> (handle: UInt64, sizeChanged: Bool, serving: [UInt8]?)? in
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
            return (state.addHandle(.file(ino: realIno)), !truncate && open.size != node.size, open.servedBytes)
        }
        if let opened {
            return replyOpened(
                request, ino: realIno, handle: opened.handle, info: info, directIO: readThrough || opened.sizeChanged,
                serving: opened.serving)
        }
        perform(request, on: readQueue) { [self] () throws(FSError) in
            let epoch = state.withLock { $0.remoteEpoch }
            let content = try backend.content(bucket: bucket, name: item)
            let (handle, sizeChanged, serving) = state.withLock { state -> (UInt64, Bool, [UInt8]?) in
                var open = state.openFiles[realIno] ?? OpenFile()
                open.load(content, fresh: state.remoteEpoch == epoch)
                open.handles += 1
                state.openFiles[realIno] = open
                return (state.addHandle(.file(ino: realIno)), open.size != node.size, open.servedBytes)
            }
            replyOpened(request, ino: realIno, handle: handle, info: info, directIO: readThrough || sizeChanged, serving: serving)
        }
    }

    /// Answers an open of file `ino` serving `bytes`, the kernel keeping its pages of the file
    /// when they still hold those bytes (`FileSystemState.keepsKernelPages`): `grep -r` run again
    /// reads no file through the mount that has not changed since. The hash is made outside the
    /// state lock.
    private func replyOpened(
        _ request: FuseRequest, ino: UInt64, handle: UInt64, info: FileInfo, directIO: Bool, serving bytes: [UInt8]?
    ) {
        let identity = directIO ? nil : bytes.flatMap(ContentIdentity.init)
        let keepCache = state.withLock { $0.keepsKernelPages(of: ino, serving: identity) }
        request.reply(open: handle, info: info.raw, directIO: directIO, keepCache: keepCache)
    }

    func read(_ request: FuseRequest, size: Int, offset: Int, handle: UInt64) {
        readsAnswered.add(1, ordering: .relaxed)
        guard offset >= 0, size >= 0 else { return fail(request, .invalidArgument) }
        let result = state.withLock { state -> Result<ReadSource, FSError> in
            guard case .file(let ino)? = state.handles[handle] else { return .failure(.badHandle) }
            guard let open = state.openFiles[ino], open.loaded else { return .success(.reload) }
            if let spill = open.spill { return .success(.spilled(spill, size: open.spillSize)) }
            if let stored = open.stored { return .success(.stored(stored)) }
            let start = min(offset, open.bytes.count)
            let end = min(start + size, open.bytes.count)
            return .success(.memory(open.bytes[start..<end]))
        }
        switch result {
        case .failure(let error): fail(request, error)
        case .success(.memory(let slice)): request.reply(bytes: slice)
        case .success(.spilled(let spill, let fileSize)):
            // Read without the spill's lock: a save streaming this file does not hold up its reads.
            let count = max(0, min(size, fileSize - offset))
            let bytes: [UInt8]
            do throws(FSError) { bytes = try spill.read(count: count, at: offset) } catch { return fail(request, error) }
            request.reply(bytes: bytes[...])
        case .success(.stored(let stored)):
            perform(request, on: readQueue) { [self] () throws(FSError) in
                request.reply(bytes: try stored.read(offset: offset, count: size, from: backend)[...])
            }
        case .success(.reload):
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

    /// Where a read finds the bytes.
    private enum ReadSource {
        case memory(ArraySlice<UInt8>)
        case spilled(SpillFile, size: Int)
        case stored(StoredContentReader)
        case reload
    }

    func write(_ request: FuseRequest, bytes: UnsafeBufferPointer<UInt8>, offset: Int, handle: UInt64) {
        switch writeStep(UnsafeRawBufferPointer(bytes), at: offset, handle: handle) {
        case .failure(let error): fail(request, error)
        case .success(.written(let count)): request.reply(written: count)
        case .success(.needsLoad), .success(.needsCopy):
            // The FUSE buffer lives only for this call.
            let copy = Array(bytes)
            perform(request, on: readQueue) { [self] () throws(FSError) in
                // Each round makes progress; a remote change or truncation racing every one is not expected.
                for _ in 0..<4 {
                    let step = copy.withUnsafeBytes { writeStep($0, at: offset, handle: handle) }
                    switch step {
                    case .failure(let error): throw error
                    case .success(.written(let count)): return request.reply(written: count)
                    case .success(.needsLoad): _ = try reloadingWorkingCopy(handle: handle) { _ in [] }
                    case .success(.needsCopy(let ino)): try copyStoredContent(of: ino)
                    }
                }
                throw FSError.io("the working copy kept changing during a write")
            }
        }
    }

    private enum WriteOutcome {
        case written(Int)
        /// A remote change emptied the working copy: load it, then write.
        case needsLoad
        /// A large file opened clean reads from the store: copy it to a temporary file, then write.
        case needsCopy(ino: UInt64)
    }

    /// pwrite into the working copy, checked against the size limit before anything is
    /// allocated (a write far past the end must not take the mount down; one crossing the limit
    /// is short, as with RLIMIT_FSIZE).
    private func writeStep(_ bytes: UnsafeRawBufferPointer, at offset: Int, handle: UInt64) -> Result<WriteOutcome, FSError> {
        let directory = backend.scratchDirectory
        let threshold = spillThreshold
        let limits = sizeLimits
        while true {
            let step = state.withLock { state -> Result<(WriteOutcome?, SpillFile?, UInt64, Int), FSError> in
                guard case .file(let ino)? = state.handles[handle] else { return .failure(.badHandle) }
                guard case .file(_, let item)? = state.table.node(ino)?.kind else { return .failure(.badHandle) }
                let count: Int
                do throws(FSError) { count = try writableCount(bytes.count, at: offset, limit: limits.limit(of: item)) } catch {
                    return .failure(error)
                }
                guard var open = state.openFiles[ino], open.loaded else { return .success((.needsLoad, nil, ino, count)) }
                if open.stored != nil { return .success((.needsCopy(ino: ino), nil, ino, count)) }
                if open.spill == nil, offset + count > threshold {
                    do throws(FSError) { try open.spillBytes(into: directory) } catch { return .failure(error) }
                    state.openFiles[ino] = open
                }
                if let spill = open.spill { return .success((nil, spill, ino, count)) }
                state.openFiles[ino]?.write(UnsafeBufferPointer(rebasing: bytes.assumingMemoryBound(to: UInt8.self)[0..<count]), at: offset)
                state.workingCopyChanged(ino)
                return .success((.written(count), nil, ino, count))
            }
            let (outcome, spill, ino, count): (WriteOutcome?, SpillFile?, UInt64, Int)
            switch step {
            case .failure(let error):
                if error == .fileTooLarge { logger.warning("write past the file size limit refused (EFBIG)", metadata: ["offset": "\(offset)"]) }
                return .failure(error)
            case .success(let value): (outcome, spill, ino, count) = value
            }
            if let outcome { return .success(outcome) }
            guard let spill else { return .failure(.badHandle) }
            // Outside the state lock: a save streaming this file holds its lock, not everyone's.
            let done = spill.withLock { () -> Result<Bool, FSError> in
                do throws(FSError) { try spill.write(UnsafeRawBufferPointer(rebasing: bytes[0..<count]), at: offset) } catch {
                    return .failure(error)
                }
                return .success(spilled(spill, of: ino, changedTo: spill.size))
            }
            switch done {
            case .failure(let error): return .failure(error)
            case .success(true): return .success(.written(count))
            case .success(false): continue  // the working copy was replaced meanwhile (O_TRUNC): write to the new one
            }
        }
    }

    /// Inside `spill`'s lock, after it changed: the working copy shows it (false when `spill` is
    /// no longer the working copy).
    func spilled(_ spill: SpillFile, of ino: UInt64, changedTo size: Int) -> Bool {
        state.withLock { state in
            guard var open = state.openFiles[ino], open.spill === spill else { return false }
            open.spillSize = size
            open.dirty = true
            open.generation += 1
            state.openFiles[ino] = open
            state.workingCopyChanged(ino)
            return true
        }
    }

    /// A large file opened clean reads from the store's chunks; before it changes (or loses
    /// its name, whose chunks then go) they are copied, a chunk at a time, to a temporary file.
    /// `limit`: a truncation's new size, past which nothing needs copying (`truncate -s 0` of a
    /// GiB copies nothing).
    func copyStoredContent(of ino: UInt64, upTo limit: Int = .max) throws(FSError) {
        guard let stored = state.withLock({ $0.openFiles[ino]?.stored }) else { return }
        let spill = try SpillFile(directory: backend.scratchDirectory)
        let size = min(stored.content.size, limit)
        try spill.withLock { () throws(FSError) in
            var index = 0
            while index * backend.chunkSize < size {
                let chunk = try backend.readChunk(of: stored.content, index: index)
                try spill.write(chunk, at: index * backend.chunkSize)
                index += 1
            }
            try spill.resize(to: size)
        }
        state.withLock { state in
            guard var open = state.openFiles[ino], open.stored === stored else { return }
            open.stored = nil
            open.spill = spill
            open.spillSize = size
            state.openFiles[ino] = open
        }
    }

    /// close(2) waits for flush: the save is safe from a crash of this process before close
    /// returns (in the store, or in the store's save journal on its way there).
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
        // A large local file's bytes stream to the store off `writeQueue`, which then only makes
        // them the file's (saves, listings and renames of other files go on meanwhile).
        performOnWriteQueue(request, savingFirst: target.ino, stagingFailed: { [self] in
            if release { closeHandle(handle, ino: target.ino) }
        }) { [self] () throws(FSError) in
            defer { if release { closeHandle(handle, ino: target.ino) } }
            try saveIfDirty(target.ino)
            try finishSave(request, ino: target.ino, sync: sync)
        }
    }

    /// On `writeQueue`, after a flush or fsync saved the file: fsync also syncs the store (and
    /// may wait for the server), then the reply.
    private func finishSave(_ request: FuseRequest, ino: UInt64, sync: Bool) throws(FSError) {
        guard sync else { return request.replyOK() }
        try syncChanges()
        guard case .file(let bucket, .entity(let key))? = state.withLock({ $0.table.node(ino)?.kind }) else {
            return request.replyOK()
        }
        replyOnceAcknowledged(request, bucket: bucket, key: key)
    }

    /// fsync and fsyncdir: every change so far survives a power loss. When they wait for the
    /// server, the changes are in the store first: what the wait asks it about.
    func syncChanges() throws(FSError) {
        if acknowledgement == nil { try backend.sync() } else { try backend.settle() }
    }

    /// fsync with `MountOptions.serverAcknowledgement`: replies once the server has the changes,
    /// or EIO (with a log line) when it does not in time. The wait runs off the work queues, so
    /// no save or read of another file waits behind it.
    func replyOnceAcknowledged(_ request: FuseRequest, bucket: String, key: String?) {
        guard let (waiter, timeout) = acknowledgement else { return request.replyOK() }
        Task.detached { [self] in
            let outcome = await waiter.waitForServer(bucket: bucket, key: key, timeout: timeout)
            let what = "\(bucket)/\(key.map { fileName(for: .entity(key: $0), in: bucket) } ?? "")"
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
    /// A file unlinked here meanwhile is not brought back; one a removal from elsewhere took
    /// is (`relinkRemovedElsewhere`).
    func saveIfDirty(_ ino: UInt64) throws(FSError) {
        var relinked: [Invalidation] = []
        defer { notify(relinked) }
        let snapshot = state.withLock { state -> (bucket: String, item: MountItemName, open: OpenFile, newID: UInt64?)? in
            guard let open = state.openFiles[ino], open.dirty, open.loaded else { return nil }
            relinked = state.relinkRemovedElsewhere(ino)
            guard let node = state.table.node(ino), node.linked, case .file(let bucket, let item) = node.kind else {
                state.openFiles[ino]?.dirty = false
                state.unstoredEntities.remove(ino)
                state.creationModes.removeValue(forKey: ino)
                if let open = state.openFiles[ino], open.handles <= 0 { state.openFiles.removeValue(forKey: ino) }
                return nil
            }
            // A stored entity keeps its number; one created in memory gets the one it was handed.
            let newID = item.isLocalFile || state.unstoredEntities.contains(ino) ? ino : nil
            return (bucket, item, open, newID)
        }
        guard let snapshot else { return }
        if let spill = snapshot.open.spill {
            if case .localFile = snapshot.item {
                if let staged = try stage(ino, spill) { try commit(staged, of: ino) }
                return
            }
            // An entity's working copy past the threshold (written large, or a large scratch
            // file renamed onto a `.json` name) is saved whole: its size limit bounds it. The
            // saves before it that wait for the store in memory go there first.
            backend.makeRoom(forSaving: snapshot.open.spillSize)
            let whole = try spill.withLock { () throws(FSError) -> (bytes: [UInt8], generation: UInt64, time: MountTime?) in
                guard spill.size <= sizeLimit(of: snapshot.item) else { throw FSError.fileTooLarge }
                let bytes = try spill.read(count: spill.size, at: 0)
                let open = state.withLock { $0.openFiles[ino] }
                return (bytes, open?.generation ?? 0, open?.pendingModificationTime)
            }
            return try save(
                ino, bucket: snapshot.bucket, item: snapshot.item, bytes: whole.bytes, generation: whole.generation,
                time: whole.time, newID: snapshot.newID)
        }
        try save(
            ino, bucket: snapshot.bucket, item: snapshot.item, bytes: snapshot.open.bytes,
            generation: snapshot.open.generation, time: snapshot.open.pendingModificationTime, newID: snapshot.newID)
    }

    private func save(
        _ ino: UInt64, bucket: String, item: MountItemName, bytes: [UInt8], generation: UInt64, time: MountTime?, newID: UInt64?
    ) throws(FSError) {
        var file = try backend.save(bucket: bucket, name: item, bytes: bytes, newID: newID)
        state.withLock { _ = $0.unstoredEntities.remove(ino) }
        if let entry = try storeCreationMode(ino, bucket: bucket, item: item) { file = MountSavedFile(entry) }
        if let time { file = MountSavedFile(try backend.setModificationTime(bucket: bucket, name: item, to: time)) }
        saved(ino, generation: generation, entry: file)
    }

    /// The store holds the working copy as of `generation`.
    private func saved(_ ino: UInt64, generation: UInt64, entry: MountSavedFile) {
        state.withLock { state in
            if var open = state.openFiles[ino], open.generation == generation {
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

    /// A spilled working copy streamed to the store, not yet the file's bytes.
    struct StagedSave: Sendable {
        let content: MountStoredContent
        let generation: UInt64
        let time: MountTime?
    }

    /// Streams a spilled working copy to the store (any queue but `writeQueue`'s hold-up is
    /// what it avoids); nil if there is nothing to save. Holds the spill's lock throughout, so
    /// the bytes are one state of the file (writes to it wait; other files' requests do not).
    func stage(_ ino: UInt64, _ spill: SpillFile) throws(FSError) -> StagedSave? {
        try spill.withLock { () throws(FSError) -> StagedSave? in
            let current = state.withLock { state -> OpenFile? in
                guard let open = state.openFiles[ino], open.dirty, open.spill === spill else { return nil }
                return open
            }
            guard let current else { return nil }
            let content = try backend.stage(size: spill.size) { offset, buffer throws(FSError) in
                try spill.read(into: buffer, at: offset)
            }
            return StagedSave(content: content, generation: current.generation, time: current.pendingModificationTime)
        }
    }

    /// On `writeQueue`: makes staged bytes the file's, unless it lost its name, became an
    /// entity, or a newer save was committed meanwhile.
    func commit(_ staged: StagedSave, of ino: UInt64) throws(FSError) {
        let target = state.withLock { state -> (bucket: String, name: String)? in
            guard let node = state.table.node(ino), node.linked, case .file(let bucket, .localFile(let name)) = node.kind,
                let open = state.openFiles[ino], open.committedGeneration <= staged.generation
            else { return nil }
            return (bucket, name)
        }
        guard let target else {
            backend.discard(staged.content)
            // Renamed onto an entity name meanwhile: saved the way an entity is.
            return try saveIfDirty(ino)
        }
        var entry = try backend.commitLocalFile(bucket: target.bucket, name: target.name, content: staged.content, newID: ino)
        entry = try storeCreationMode(ino, bucket: target.bucket, item: .localFile(name: target.name)) ?? entry
        if let time = staged.time {
            entry = try backend.setModificationTime(bucket: target.bucket, name: .localFile(name: target.name), to: time)
        }
        state.withLock { $0.openFiles[ino]?.committedGeneration = staged.generation }
        saved(ino, generation: staged.generation, entry: MountSavedFile(entry))
    }

    /// `mode` is open's, the umask already taken from it (the kernel does, as the mount does not
    /// ask for FUSE_CAP_DONT_MASK): `creat(path, 0600)` makes a private file under any umask.
    func create(_ request: FuseRequest, parent: UInt64, name: String, mode: mode_t, info: FileInfo) {
        makeFile(request, parent: parent, name: name, mode: mode | S_IFREG, info: info)
    }

    /// Regular files only; devices, fifos and sockets have no place in a bucket.
    func mknod(_ request: FuseRequest, parent: UInt64, name: String, mode: mode_t) {
        guard mode & S_IFMT == S_IFREG || mode & S_IFMT == 0 else { return fail(request, .notPermitted) }
        makeFile(request, parent: parent, name: name, mode: mode | S_IFREG, info: nil)
    }

    /// The permission bits a new file keeps, nil for the default (0644). Setuid, setgid and
    /// sticky bits are dropped, as chmod refuses them.
    private static func creationPermissions(_ mode: mode_t) -> mode_t? {
        let permissions = mode & 0o777
        return permissions == Attributes.fileMode & 0o777 ? nil : permissions
    }

    /// On `writeQueue`, after the save that first stored a file created in memory: the store
    /// takes the mode it was created with. Returns the stored entry then.
    private func storeCreationMode(_ ino: UInt64, bucket: String, item: MountItemName) throws(FSError) -> MountEntry? {
        guard let permissions = state.withLock({ $0.creationModes.removeValue(forKey: ino) }) else { return nil }
        return try backend.setAttributes(bucket: bucket, name: item, permissions: Int(permissions), atime: nil)
    }

    private func makeFile(_ request: FuseRequest, parent: UInt64, name: String, mode: mode_t, info: FileInfo?) {
        perform(request, on: writeQueue) { [self] () throws(FSError) in
            let bucket = try bucket(of: parent)
            let item = itemName(forFileName: name, in: bucket)
            try loadDirectory(parent)
            if let existing = state.withLock({ $0.table.child(of: parent, named: name) }) {
                // The kernel asks only after a negative lookup, but another process may have won.
                guard let info, info.flags & O_EXCL == 0, case .file = existing.kind else { throw FSError.exists }
                return reopen(request, ino: existing.ino, info: info)
            }
            let node: Node
            let inMemoryOnly: Bool
            if info != nil {
                // A file is created, written and closed at once (a save; an editor's scratch file
                // is also fsynced and renamed): it reaches the store at its first save (flush,
                // fsync, rename, release, or an fsync of its directory), which stores it under the
                // number handed out here, in one transaction. Until then it has no bytes to lose.
                let now = Attributes.now()
                node = Node(
                    ino: try reservedID(), parent: parent, fileName: name, kind: .file(bucket: bucket, item: item),
                    size: 0, mtime: now, ctime: now, permissions: Self.creationPermissions(mode))
                inMemoryOnly = true
            } else {
                _ = try backend.save(bucket: bucket, name: item, bytes: [], newID: nil)
                if let permissions = Self.creationPermissions(mode) {
                    _ = try backend.setAttributes(bucket: bucket, name: item, permissions: Int(permissions), atime: nil)
                }
                guard let entry = try backend.entry(bucket: bucket, name: item) else { throw FSError.notFound }
                node = self.node(for: entry, parent: parent)
                inMemoryOnly = false
            }
            let handle = state.withLock { state -> UInt64? in
                state.table.upsert(node)
                if inMemoryOnly, let permissions = node.permissions { state.creationModes[node.ino] = permissions }
                state.touchDirectory(parent)
                if inMemoryOnly, !item.isLocalFile { state.unstoredEntities.insert(node.ino) }
                guard info != nil else { return nil }
                var open = state.openFiles[node.ino] ?? OpenFile()
                open.bytes = []
                open.spill = nil
                open.stored = nil
                open.loaded = true
                open.dirty = inMemoryOnly
                open.handles += 1
                state.openFiles[node.ino] = open
                _ = state.keepsKernelPages(of: node.ino, serving: nil)  // a create's reply drops them
                return state.addHandle(.file(ino: node.ino))
            }
            let reply = try rememberedEntry(node.ino)
            if let info, let handle {
                backend.openedForWriting(bucket: bucket, name: item)
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
            if info.writes { backend.openedForWriting(bucket: bucket, name: item) }
            let (epoch, inMemory) = state.withLock { ($0.remoteEpoch, $0.openFiles[ino]?.loaded ?? false) }
            // A working copy in memory is the file (one created in memory is not stored yet).
            let content = truncate || inMemory ? .bytes([]) : try backend.content(bucket: bucket, name: item)
            let handle = state.withLock { state -> UInt64 in
                state.closedFiles.remove(ino)
                var open = state.openFiles[ino] ?? OpenFile()
                if truncate {
                    open.truncate()
                } else {
                    open.load(content, fresh: state.remoteEpoch == epoch)
                }
                open.handles += 1
                state.openFiles[ino] = open
                if truncate { state.workingCopyChanged(ino) }
                _ = state.keepsKernelPages(of: ino, serving: nil)  // a create's reply drops them
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
        // A large file read from the store's chunks: they go with the name.
        try copyStoredContent(of: node.ino)
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
