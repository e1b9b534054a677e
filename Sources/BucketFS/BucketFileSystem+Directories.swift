import CFuse
import Dispatch
import Glibc

/// Directories: the root lists buckets, a bucket lists its files.
extension BucketFileSystem {
    func opendir(_ request: FuseRequest, ino: UInt64, info: FileInfo) {
        afterFetchingHistory(of: ino) { [self] in openDirectory(request, ino: ino, info: info) }
    }

    private func openDirectory(_ request: FuseRequest, ino: UInt64, info: FileInfo) {
        // The root, group directories and the `.history` view are listed again at each opendir:
        // another client may have added a bucket, a note or a version.
        let refresh = bucketParent(ino) != nil || historyPath(ino) != nil
        performInDirectory(request, ino, refresh: refresh) { [self] () throws(FSError) in
            let opened = try state.withLock { state throws(FSError) in
                guard let node = state.table.node(ino) else { throw FSError.notFound }
                guard node.isDirectory else { throw FSError.notDirectory }
                return state.openDirectory(node)
            }
            // The kernel keeps the listing it read (a warm `ls` of a big bucket asks nothing), from
            // one open to the next while no name came or went; a remote change also invalidates
            // the directory's pages, which hold that listing.
            request.reply(openDirectory: opened.handle, info: info.raw, keepCache: opened.keepKernelCache)
        }
    }

    func readdir(_ request: FuseRequest, size: Int, offset: Int, handle: UInt64) {
        fillDirectory(request, size: size, offset: offset, handle: handle, plus: false)
    }

    /// Names with attributes: `ls -l` of 100,000 files needs no getattr per file.
    func readdirplus(_ request: FuseRequest, size: Int, offset: Int, handle: UInt64) {
        fillDirectory(request, size: size, offset: offset, handle: handle, plus: true)
    }

    private func fillDirectory(_ request: FuseRequest, size: Int, offset: Int, handle: UInt64, plus: Bool) {
        guard offset >= 0 else { return fail(request, .invalidArgument) }
        let timeout = cacheTimeout
        var buffer = [CChar](repeating: 0, count: max(size, 0))
        // Offsets are indices into the listing taken at opendir, so they stay valid between calls.
        // A node whose name left the directory since is passed over (POSIX leaves open whether
        // a name removed after opendir is read).
        let used = state.withLock { state -> Int? in
            guard case .directory(let directory, let items)? = state.handles[handle] else { return nil }
            var used = 0
            var index = offset
            buffer.withUnsafeMutableBufferPointer { output in
                guard let base = output.baseAddress else { return }
                while index < items.count {
                    let ino = items[index]
                    let isDot = index < 2
                    let remaining = output.count - used
                    let needed: Int
                    let node = isDot ? state.currentNode(ino) : state.currentNode(listedIn: directory, ino)
                    // `.` and `..` are read without attributes even if their node has gone.
                    guard let node = node ?? (isDot && !plus ? Self.placeholderDirectory(ino) : nil) else {
                        index += 1
                        continue
                    }
                    let name = isDot ? (index == 0 ? "." : "..") : node.fileName
                    if plus {
                        var parameter = fuse_entry_param()
                        if !isDot {
                            parameter = EntryReply(ino: ino, attributes: attributes.stat(for: node), timeout: timeout).parameter
                        } else {
                            parameter.attr = attributes.stat(for: node)
                        }
                        needed = name.withCString {
                            fuse_add_direntry_plus(request.raw, base + used, remaining, $0, &parameter, off_t(index + 1))
                        }
                        if needed > remaining { break }
                        // The kernel takes a reference for every entry but . and .. (fuse_lowlevel.h).
                        if !isDot { state.table.remember(ino) }
                    } else {
                        var attributes = stat()
                        attributes.st_ino = ino_t(ino)
                        if node.isSymlink {
                            attributes.st_mode = Attributes.symlinkMode
                        } else {
                            attributes.st_mode = node.isDirectory ? Attributes.directoryMode : Attributes.fileMode
                        }
                        needed = name.withCString {
                            fuse_add_direntry(request.raw, base + used, remaining, $0, &attributes, off_t(index + 1))
                        }
                        if needed > remaining { break }
                    }
                    used += needed
                    index += 1
                }
            }
            return used
        }
        guard let used else { return fail(request, .badHandle) }
        buffer.withUnsafeBufferPointer { output in
            _ = fuse_reply_buf(request.raw, output.baseAddress, used)
        }
    }

    /// What plain readdir shows of `.` or `..` whose node is gone: a directory.
    private static func placeholderDirectory(_ ino: UInt64) -> Node {
        Node(ino: ino, parent: ino, fileName: "", kind: .root, size: 0, mtime: 0, ctime: 0)
    }

    func releasedir(_ request: FuseRequest, handle: UInt64) {
        state.withLock { _ = $0.handles.removeValue(forKey: handle) }
        request.replyOK()
    }

    /// Renames and removals are kept from their reply on, files created in memory from their
    /// first save; this stores those not saved yet and makes everything (and every save before)
    /// survive a power loss too, as fsync of a directory does on a local disk.
    func fsyncdir(_ request: FuseRequest, ino: UInt64) {
        perform(request, on: writeQueue) { [self] () throws(FSError) in
            for created in state.withLock({ state in state.unstoredEntities.filter { state.table.node($0)?.parent == ino } }) {
                try saveIfDirty(created)
            }
            try syncChanges()
            guard case .bucket(let name)? = state.withLock({ $0.table.node(ino)?.kind }) else { return request.replyOK() }
            replyOnceAcknowledged(request, bucket: name, key: nil)
        }
    }

    /// mkdir at the root adds a bucket, in a group directory a bucket of that group
    /// (`BucketGroups`); buckets hold no subdirectories.
    func mkdir(_ request: FuseRequest, parent: UInt64, name: String) {
        guard let place = bucketParent(parent) else { return fail(request, refusal(in: parent, else: .notPermitted)) }
        // A `/` in the name would put the bucket a level deeper than the directory it is made in.
        guard let leaf = FileNameCodec.decode(name), BucketGroups.group(of: leaf) == nil else {
            return fail(request, .invalidArgument)
        }
        let bucketName = BucketGroups.bucket(group: place.group, leaf: leaf)
        perform(request, on: writeQueue) { [self] () throws(FSError) in
            try loadDirectory(parent)
            if state.withLock({ $0.table.child(of: parent, named: name) }) != nil { throw FSError.exists }
            let bucket = try backend.createBucket(named: bucketName)
            state.withLock { state in
                state.table.upsert(Self.node(for: bucket, parent: parent))
                state.touchDirectory(parent)
            }
            request.reply(entry: try rememberedEntry(bucket.id))
        }
    }

    func rmdir(_ request: FuseRequest, parent: UInt64, name: String) {
        guard bucketParent(parent) != nil else {
            let missing = state.withLock { $0.table.child(of: parent, named: name) } == nil
            return fail(request, refusal(in: parent, else: missing ? .notFound : .notDirectory))
        }
        removeBucket(request, parent: parent, name: name, until: .now() + Self.removalConfirmationWait)
    }

    /// How long rmdir of a bucket waits for the server to confirm the removals made in it
    /// (`rm -r` removes the files, then the directory at once); offline it then fails ENOTEMPTY.
    static let removalConfirmationWait: DispatchTimeInterval = .seconds(10)

    /// On `writeQueue`; while the bucket holds only removals the server has not confirmed, tries
    /// again a little later (the request waits, as on a network file system) until `deadline`.
    private func removeBucket(_ request: FuseRequest, parent: UInt64, name: String, until deadline: DispatchTime) {
        writeQueue.async { [self] in
            do throws(FSError) {
                guard let node = state.withLock({ $0.table.child(of: parent, named: name) }) else { throw FSError.notFound }
                // A group directory exists only while it holds buckets.
                if case .group = node.kind { throw FSError.notEmpty }
                guard case .bucket(let bucketName) = node.kind else { throw node.isDirectory ? FSError.readOnly : FSError.notDirectory }
                try loadDirectory(node.ino)
                if state.withLock({ $0.table.childCount(of: node.ino) }) > 0 { throw FSError.notEmpty }
                try backend.removeBucket(named: bucketName)
                state.withLock { state in
                    state.table.unlink(parent: parent, name: name)
                    state.touchDirectory(parent)
                    if case .group(let group)? = state.table.node(parent)?.kind, state.table.childCount(of: parent) == 0 {
                        // Its last bucket went: the group directory goes with it.
                        state.table.unlink(parent: InodeTable.rootInode, name: FileNameCodec.encode(group))
                        state.touchDirectory(InodeTable.rootInode)
                    }
                }
                request.replyOK()
            } catch .busy where DispatchTime.now() < deadline {
                DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(20)) { [self] in
                    // Unmounted meanwhile: the session that would take the answer is gone.
                    guard session != nil else { return }
                    removeBucket(request, parent: parent, name: name, until: deadline)
                }
            } catch {
                fail(request, error == .busy ? .notEmpty : error)
            }
        }
    }
}
