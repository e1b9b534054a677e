import Glibc

/// The read-only `.history` view (`MountOptions.history`): `.history/<bucket>/` lists the
/// bucket's entities that have server versions (deleted ones too) as directories named like
/// their files without `.json`; `.history/<bucket>/<key>/` lists the versions fetched from the
/// server as `<version>.json`, each rendered as the mount renders the entity, sized exactly and
/// timed when the server accepted it.
///
/// Listing an entity's directory first fetches the versions the server keeps (the same range as
/// `bucketfs history`), and looking up a version not listed fetches that one; fetches run off the
/// work queues, holding no lock, bounded by the source's timeout. What was fetched is kept in the
/// store, so it lists and reads offline. Nothing here can be changed: EROFS.
extension BucketFileSystem {
    /// Where `ino` is in the view; nil for every other node.
    func historyPath(_ ino: UInt64) -> HistoryPath? {
        guard case .history(let path)? = state.withLock({ $0.table.node(ino)?.kind }) else { return nil }
        return path
    }

    /// EROFS for a change inside the view, else `other`.
    func refusal(in directory: UInt64, else other: FSError) -> FSError {
        historyPath(directory) == nil ? other : .readOnly
    }

    /// Runs `body` once the versions the server keeps of an entity are fetched, when `ino` is
    /// that entity's directory in the view (otherwise at once).
    func afterFetchingHistory(of ino: UInt64, _ body: @escaping @Sendable () -> Void) {
        guard case .entity(let bucket, let key)? = historyPath(ino), let history else { return body() }
        Task.detached { [self] in
            if let reason = await history.fetch(bucket: bucket, key: key, versions: nil) {
                logger.notice(
                    "history: listing the versions fetched before; the server cannot be asked",
                    metadata: ["bucket": "\(bucket)", "key": "\(key)", "reason": "\(reason)"])
            }
            // Unmounted meanwhile: the session that would take the answer is gone.
            guard session != nil else { return }
            body()
        }
    }

    /// lookup of a name a view directory did not list: it may be new (an entity saved, a version
    /// made since), so the directory is listed again, after fetching the version it names.
    /// Unavailable offline: EIO with a log line; not a version the server keeps: ENOENT.
    func lookupInHistory(_ request: FuseRequest, parent: UInt64, name: String) {
        let path = historyPath(parent)
        let relist: @Sendable (String?) -> Void = { [self] unavailable in
            perform(request, on: writeQueue) { [self] () throws(FSError) in
                try loadDirectory(parent, refresh: true)
                guard let found = state.withLock({ $0.table.child(of: parent, named: name) }) else {
                    guard let unavailable else { throw FSError.notFound }
                    logger.error(
                        "history: a version that was not fetched before is unavailable",
                        metadata: ["name": "\(name)", "reason": "\(unavailable)"])
                    throw FSError.io("version unavailable: \(unavailable)")
                }
                request.reply(entry: try rememberedEntry(found.ino))
            }
        }
        guard case .entity(let bucket, let key)? = path, let version = HistoryPath.version(fromFileName: name),
            let history
        else { return relist(nil) }
        Task.detached { [self] in
            let unavailable = await history.fetch(bucket: bucket, key: key, versions: [version])
            guard session != nil else { return }
            relist(unavailable)
        }
    }

    /// On `writeQueue`: a view directory's listing, from the store (nothing here waits for the server).
    func loadHistoryDirectory(_ directory: UInt64, _ path: HistoryPath) throws(FSError) {
        guard let history else { throw FSError.notFound }
        let rows: [(path: HistoryPath, name: String, size: Int, time: MountTime?)]
        switch path {
        case .root:
            rows = try backend.buckets().map { (.bucket($0.name), FileNameCodec.encode($0.name), 0, nil) }
        case .bucket(let bucket):
            rows = try history.keys(bucket: bucket).map { (.entity(bucket: bucket, key: $0), FileNameCodec.stem(forKey: $0), 0, nil) }
        case .entity(let bucket, let key):
            rows = try history.versions(bucket: bucket, key: key).map {
                (.version(bucket: bucket, key: key, version: $0.version), HistoryPath.fileName(forVersion: $0.version), $0.size, $0.acceptedAt)
            }
        case .version:
            throw FSError.notDirectory
        }
        state.withLock { state in
            let mountTime = state.table.node(InodeTable.rootInode)?.mtime ?? 0
            let listing = rows.map { row in
                Node(
                    ino: state.historyInodes.number(for: row.path), parent: directory, fileName: row.name, kind: .history(row.path),
                    size: row.size, mtime: row.time ?? mountTime, ctime: row.time ?? mountTime)
            }
            state.table.replaceListing(of: directory, with: listing)
        }
    }

    /// open of a version: read-only (EROFS for any write access), its bytes from the store.
    func openHistory(_ request: FuseRequest, node: Node, path: HistoryPath, info: FileInfo) {
        guard case .version(let bucket, let key, let version) = path else { return fail(request, .isDirectory) }
        guard info.flags & O_ACCMODE == O_RDONLY, info.flags & O_TRUNC == 0 else { return fail(request, .readOnly) }
        guard let history else { return fail(request, .notFound) }
        perform(request, on: readQueue) { [self] () throws(FSError) in
            guard let bytes = try history.content(bucket: bucket, key: key, version: version) else { throw FSError.notFound }
            let handle = state.withLock { state -> UInt64 in
                var open = state.openFiles[node.ino] ?? OpenFile()
                // Not the store's file bytes: kept out of the closed-file cache.
                open.load(bytes, fresh: false)
                open.handles += 1
                state.openFiles[node.ino] = open
                return state.addHandle(.file(ino: node.ino))
            }
            request.reply(open: handle, info: info.raw)
        }
    }
}

extension FileSystemState {
    /// The root's `.history` entry, when the mount shows the view.
    mutating func historyRoot(shown: Bool) -> [Node] {
        guard shown else { return [] }
        let time = table.node(InodeTable.rootInode)?.mtime ?? 0
        return [
            Node(
                ino: historyInodes.number(for: .root), parent: InodeTable.rootInode, fileName: HistoryPath.rootName,
                kind: .history(.root), size: 0, mtime: time, ctime: time)
        ]
    }
}
