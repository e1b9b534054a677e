/// Remote changes: the store already holds the new bytes; update the tree and tell the kernel.
extension BucketFileSystem {
    /// On `writeQueue` (ordered with our own saves): one transaction's changes. Invalidations go
    /// to the notifier thread.
    func applyRemoteChanges(_ changes: [MountChange]) {
        // Nothing of a bucket not listed yet is cached here, so there is nothing to invalidate:
        // a first sync's pages cost one look each.
        let loaded = state.withLock { state -> [(change: MountChange, bucketNode: Node)] in
            state.remoteEpoch += 1
            var loadedBuckets: [String: Node?] = [:]
            return changes.compactMap { change in
                state.closedFiles.remove(change.id)
                let bucketNode = loadedBuckets[change.bucket] ?? {
                    let node = state.bucketNode(named: change.bucket).flatMap { state.table.isLoaded($0.ino) ? $0 : nil }
                    loadedBuckets[change.bucket] = node
                    return node
                }()
                return bucketNode.map { (change, $0) }
            }
        }
        for (change, bucketNode) in loaded { applyRemoteChange(change, in: bucketNode) }
    }

    private func applyRemoteChange(_ change: MountChange, in bucketNode: Node) {
        let fileName = fileName(for: .entity(key: change.key), in: change.bucket)
        let entry: MountEntry?
        do {
            entry = try backend.entry(bucket: change.bucket, name: .entity(key: change.key))
        } catch {
            logger.error("remote change lookup failed", metadata: ["key": "\(change.key)", "error": "\(error)"])
            return
        }
        // A clean working copy open on the note takes its new bytes now rather than at its next
        // use: a removal from elsewhere coming before that use would leave the descriptor
        // nothing to read or write over (ENOENT), where POSIX keeps the bytes it last showed.
        // On `writeQueue`, as every remote change is: nothing changes the note in between.
        let reloaded: MountContent? = if let entry, state.withLock({ $0.openFiles[entry.id].map { !$0.dirty } ?? false }) {
            try? backend.content(bucket: change.bucket, name: .entity(key: change.key))
        } else {
            nil
        }
        let invalidations = state.withLock { state -> [Invalidation] in
            var result: [Invalidation] = []
            let previous = state.table.child(of: bucketNode.ino, named: fileName)
            if let previous, state.unstoredEntities.contains(previous.ino) {
                // Created here in memory meanwhile: its first save lands on what the server sent,
                // as a save over it would, and keeps the number the kernel knows.
                return result
            }
            if let entry {
                let node = node(for: entry, parent: bucketNode.ino)
                if let previous, previous.ino != node.ino {
                    // The kernel may hold the old number for the name a while yet (the
                    // invalidation below is on its way, and a rename it asks for meanwhile
                    // moves its name for the old number along): the old number means this
                    // file from now on. Else the renamed file would show as missing.
                    state.table.alias(previous.ino, to: node.ino)
                    if state.table.isReferenced(previous.ino) { result.append(.inode(previous.ino)) }
                }
                state.table.upsert(node)
                state.closedFiles.remove(node.ino)
                if var open = state.openFiles[node.ino], !open.dirty {
                    // A clean working copy shows the store's new bytes: loaded above, or (if that
                    // read failed) read at its next use.
                    open.unload()
                    if let reloaded { open.load(reloaded, fresh: true) }
                    state.openFiles[node.ino] = open
                }
                if state.table.isReferenced(node.ino) { result.append(.inode(node.ino)) }
                if previous == nil || previous?.ino != node.ino {
                    result.append(.entry(parent: bucketNode.ino, name: fileName))
                }
                if previous == nil {
                    state.touchDirectory(bucketNode.ino)
                    result.append(.inode(bucketNode.ino))
                }
            } else if let previous, state.openFiles[previous.ino]?.dirty == true {
                // Removed elsewhere while written here and not saved yet: the edit wins over the
                // removal, as one saved already would (the store keeps a pending edit and makes it
                // again). The name stays, so the save at close makes the entity anew; dropping the
                // name would send the user's bytes nowhere. Until then it is a file made in
                // memory (`unstoredEntities`): its save makes the entity under its own number.
                state.unstoredEntities.insert(previous.ino)
                logger.debug("removed elsewhere while written here: kept", metadata: ["bucket": "\(change.bucket)", "file": "\(fileName)"])
                return result
            } else if let previous {
                logger.debug("removed elsewhere", metadata: ["bucket": "\(change.bucket)", "file": "\(fileName)"])
                state.closedFiles.remove(previous.ino)
                state.table.unlink(parent: bucketNode.ino, name: fileName)
                state.table.noteRemovedElsewhere(previous.ino)
                state.touchDirectory(bucketNode.ino)
                result.append(.entry(parent: bucketNode.ino, name: fileName))
                result.append(.inode(bucketNode.ino))
                if state.table.isReferenced(previous.ino) { result.append(.inode(previous.ino)) }
            }
            return result
        }
        notify(invalidations)
    }
}
