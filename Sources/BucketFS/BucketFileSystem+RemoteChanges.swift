/// Remote changes: the store already holds the new bytes; update the tree and tell the kernel.
extension BucketFileSystem {
    /// On `writeQueue` (ordered with our own saves): one transaction's changes. Invalidations go
    /// to the notifier thread.
    func applyRemoteChanges(_ changes: [MountChange]) {
        // Nothing of a bucket not listed yet is cached here, so there is nothing to invalidate:
        // a first sync's pages cost one look each.
        let loaded = state.withLock { state -> [MountChange] in
            state.remoteEpoch += 1
            var loadedBuckets: [String: Bool] = [:]
            return changes.filter { change in
                state.closedFiles.remove(change.id)
                if let known = loadedBuckets[change.bucket] { return known }
                let loaded = state.bucketNode(named: change.bucket).map { state.table.isLoaded($0.ino) } ?? false
                loadedBuckets[change.bucket] = loaded
                return loaded
            }
        }
        for change in loaded { applyRemoteChange(change) }
    }

    private func applyRemoteChange(_ change: MountChange) {
        guard let bucketNode = state.withLock({ $0.bucketNode(named: change.bucket) }), isLoaded(bucketNode.ino) else { return }
        let fileName = fileName(for: .entity(key: change.key), in: change.bucket)
        let entry: MountEntry?
        do {
            entry = try backend.entry(bucket: change.bucket, name: .entity(key: change.key))
        } catch {
            logger.error("remote change lookup failed", metadata: ["key": "\(change.key)", "error": "\(error)"])
            return
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
                state.table.upsert(node)
                state.closedFiles.remove(node.ino)
                if var open = state.openFiles[node.ino], !open.dirty {
                    // A clean working copy shows the store's new bytes from the next read on.
                    open.unload()
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
            } else if let previous {
                state.closedFiles.remove(previous.ino)
                state.table.unlink(parent: bucketNode.ino, name: fileName)
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
