import CFuse
import Glibc

/// unlink, rename, symlink: changes to names inside buckets.
extension BucketFileSystem {
    func unlink(_ request: FuseRequest, parent: UInt64, name: String) {
        withLoadedDirectory(request, parent) { [self] () throws(FSError) in
            guard let node = state.withLock({ $0.table.child(of: parent, named: name) }) else { throw FSError.notFound }
            switch node.kind {
            case .root, .bucket, .group:
                throw FSError.isDirectory
            case .history:
                throw FSError.readOnly
            case .symlink:
                state.withLock { state in
                    state.table.unlink(parent: parent, name: name)
                    state.touchDirectory(parent)
                }
                request.replyOK()
            case .file(let bucket, let item):
                perform(request, on: writeQueue) { [self] () throws(FSError) in
                    try keepWorkingCopy(of: node)
                    do throws(FSError) {
                        try backend.delete(bucket: bucket, name: item)
                    } catch .notFound where item.isLocalFile || state.withLock({ $0.unstoredEntities.contains(node.ino) }) {
                        // Created in memory and never saved (`makeFile`): the store has nothing to remove.
                    }
                    state.withLock { state in
                        state.unstoredEntities.remove(node.ino)
                        state.creationModes.removeValue(forKey: node.ino)
                        state.table.unlink(parent: parent, name: name)
                        state.touchDirectory(parent)
                        state.closedFiles.remove(node.ino)
                    }
                    request.replyOK()
                }
            }
        }
    }

    /// rename(2) within or across buckets. The store moves the bytes in one transaction, so a
    /// rename over an existing file is atomic (the editor save pattern: write scratch, rename over).
    func rename(_ request: FuseRequest, parent: UInt64, name: String, newParent: UInt64, newName: String, flags: UInt32) {
        let noReplace: UInt32 = 1  // RENAME_NOREPLACE
        let exchange: UInt32 = 2  // RENAME_EXCHANGE
        guard flags & exchange == 0, flags & ~(noReplace | exchange) == 0 else { return fail(request, .invalidArgument) }
        guard parent != InodeTable.rootInode, newParent != InodeTable.rootInode else { return fail(request, .notPermitted) }
        let source = state.withLock { $0.table.child(of: parent, named: name)?.ino }
        logger.debug("rename", metadata: ["from": "\(name)", "to": "\(newName)", "source": "\(source.map(String.init) ?? "none")"])
        performOnWriteQueue(request, savingFirst: source) { [self] () throws(FSError) in
            // Where a failed rename stopped, for the log (a rename answered with an error must
            // have changed nothing).
            var stage = "looking up the names"
            do throws(FSError) {
                let sourceBucket = try bucket(of: parent)
                let destinationBucket = try bucket(of: newParent)
                guard sourceBucket == destinationBucket else { throw FSError.crossDevice }
                let destinationItem = itemName(forFileName: newName, in: destinationBucket)
                try loadDirectory(parent)
                try loadDirectory(newParent)
                let (source, existing) = state.withLock {
                    ($0.table.child(of: parent, named: name), $0.table.child(of: newParent, named: newName))
                }
                guard let source else { throw FSError.notFound }
                if let existing {
                    if flags & noReplace != 0 { throw FSError.exists }
                    if existing.isDirectory { throw FSError.isDirectory }
                    if existing.ino == source.ino { return request.replyOK() }
                }
                switch source.kind {
                case .root, .bucket, .group:
                    throw FSError.notPermitted
                case .history:
                    throw FSError.readOnly
                case .symlink(_, _, let target):
                    // Lock links stay local: they cannot become entities.
                    guard case .localFile = destinationItem else { throw FSError.notPermitted }
                    if let existing, case .file(let bucket, let item) = existing.kind {
                        try backend.delete(bucket: bucket, name: item)
                    }
                    state.withLock { state in
                        var moved = source
                        moved.parent = newParent
                        moved.fileName = newName
                        moved.kind = .symlink(bucket: destinationBucket, name: newName, target: target)
                        state.table.upsert(moved)
                        state.touchDirectory(parent)
                        state.touchDirectory(newParent)
                    }
                    request.replyOK()
                case .file(_, let sourceItem):
                    stage = "saving the source"
                    try saveIfDirty(source.ino)
                    stage = "moving it in the store"
                    // A large file read from its chunks: an entity takes its bytes whole, and the chunks go.
                    if !destinationItem.isLocalFile { try copyStoredContent(of: source.ino) }
                    if let existing {
                        if case .symlink = existing.kind {
                            state.withLock { $0.table.unlink(parent: newParent, name: newName) }
                        } else {
                            try keepWorkingCopy(of: existing)
                        }
                    }
                    // What the source is now (the save above may have changed it), for a backend
                    // that moves it without looking it up.
                    let saved = state.withLock { $0.table.node(source.ino) } ?? source
                    let entry = try backend.rename(
                        bucket: sourceBucket,
                        from: MountEntry(
                            id: saved.ino, bucket: sourceBucket, name: sourceItem, size: saved.size, mtime: saved.mtime,
                            ctime: saved.ctime, permissions: saved.permissions.map(Int.init), atime: saved.atime),
                        to: destinationItem)
                    let moved = node(for: entry, parent: newParent)
                    let aliased = state.withLock { state -> Bool in
                        for ino in [source.ino, moved.ino] + (existing.map { [$0.ino] } ?? []) { state.closedFiles.remove(ino) }
                        // The file it replaced loses its name (upsert unlinks it); descriptors open on
                        // it keep their bytes and never save them over the new file (POSIX).
                        state.table.unlink(parent: parent, name: name)
                        state.table.upsert(moved)
                        state.touchDirectory(parent)
                        state.touchDirectory(newParent)
                        guard moved.ino != source.ino else { return false }
                        // A backend that gave the destination another number: the kernel now shows
                        // the source's inode under the new name, so that inode means the destination
                        // until the kernel looks the name up again.
                        state.table.alias(source.ino, to: moved.ino)
                        if let open = state.openFiles.removeValue(forKey: source.ino), state.openFiles[moved.ino] == nil {
                            state.openFiles[moved.ino] = open
                            for (number, handle) in state.handles {
                                if case .file(let ino) = handle, ino == source.ino { state.handles[number] = .file(ino: moved.ino) }
                            }
                        }
                        return true
                    }
                    // Before the reply, so that an open of the new name right after it reads
                    // through (`open`) until the kernel drops the size it holds for the source's
                    // number: the moved file's may differ (another number, or store bytes newer
                    // than the tree's, from a change from elsewhere the tree has not applied yet).
                    if aliased || moved.size != saved.size { notify([.inode(source.ino)]) }
                    request.replyOK()
                    // After it: the kernel takes the directory's lock for this one.
                    if aliased { notify([.entry(parent: newParent, name: newName)]) }
                }
            } catch {
                logger.debug("rename failed", metadata: ["from": "\(name)", "to": "\(newName)", "stage": "\(stage)", "error": "\(error)"])
                throw error
            }
        }
    }

    /// Symlinks only for local-only names (emacs lock files `.#name`); kept in memory.
    func symlink(_ request: FuseRequest, target: String, parent: UInt64, name: String) {
        withLoadedDirectory(request, parent) { [self] () throws(FSError) in
            let bucket = try bucket(of: parent)
            guard case .localFile = itemName(forFileName: name, in: bucket) else { throw FSError.notPermitted }
            let ino = try state.withLock { state throws(FSError) -> UInt64 in
                if state.table.child(of: parent, named: name) != nil { throw FSError.exists }
                let ino = state.nextSymlinkInode
                state.nextSymlinkInode += 1
                let now = Attributes.now()
                state.table.upsert(
                    Node(
                        ino: ino, parent: parent, fileName: name, kind: .symlink(bucket: bucket, name: name, target: target),
                        size: target.utf8.count, mtime: now, ctime: now))
                state.touchDirectory(parent)
                return ino
            }
            request.reply(entry: try rememberedEntry(ino))
        }
    }
}
