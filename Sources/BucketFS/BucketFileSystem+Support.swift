import Dispatch
import Glibc

/// Shared steps of the operations: hand-off, replies, directory loading.
extension BucketFileSystem {
    /// Runs `body` through `queue`, in its order (here when the queue is idle, else on one of its
    /// threads); a thrown error is the reply.
    func perform(_ request: FuseRequest, on queue: WorkQueue, _ body: @escaping @Sendable () throws(FSError) -> Void) {
        queue.run { [self] in
            do throws(FSError) { try body() } catch { fail(request, error) }
        }
    }

    /// Runs `body` here when the answer is in memory, else on `queue`.
    func perform(
        _ request: FuseRequest, inlineIf inline: Bool, else queue: WorkQueue,
        _ body: @escaping @Sendable () throws(FSError) -> Void
    ) {
        if inline {
            do throws(FSError) { try body() } catch { fail(request, error) }
        } else {
            perform(request, on: queue, body)
        }
    }

    /// Runs `body` on `writeQueue`, after streaming `ino`'s unsaved spilled working copy to the
    /// store off it (as a flush does): a save `body` makes of that file then holds `writeQueue`
    /// only to commit its bytes, so saves of other files never wait for a large file's length.
    /// `stagingFailed` runs when streaming fails (the request is then answered with its error).
    func performOnWriteQueue(
        _ request: FuseRequest, savingFirst ino: UInt64?, stagingFailed: @escaping @Sendable () -> Void = {},
        _ body: @escaping @Sendable () throws(FSError) -> Void
    ) {
        guard let ino, let spill = unsavedSpill(of: ino) else { return perform(request, on: writeQueue, body) }
        perform(request, on: streamQueue) { [self] () throws(FSError) in
            let staged: StagedSave?
            do throws(FSError) { staged = try stage(ino, spill) } catch {
                stagingFailed()
                throw error
            }
            perform(request, on: writeQueue) { [self] () throws(FSError) in
                if let staged { try commit(staged, of: ino) }
                try body()
            }
        }
    }

    /// The spilled working copy of a local file with changes not yet in the store (entity files
    /// are bounded by their limit and saved whole).
    func unsavedSpill(of ino: UInt64) -> SpillFile? {
        state.withLock { state in
            guard let open = state.openFiles[ino], open.dirty, let spill = open.spill,
                case .file(_, .localFile)? = state.table.node(ino)?.kind
            else { return nil }
            return spill
        }
    }

    func fail(_ request: FuseRequest, _ error: FSError) {
        if case .io = error { logger.error("operation failed", metadata: ["error": "\(error)"]) }
        request.reply(error: error)
    }

    /// The entry reply for `ino`, counting the reference the kernel now holds.
    func rememberedEntry(_ ino: UInt64) throws(FSError) -> EntryReply {
        let timeout = cacheTimeout
        let reply: EntryReply? = state.withLock { state in
            guard let node = state.currentNode(ino) else { return nil }
            state.table.remember(ino)
            return EntryReply(ino: ino, attributes: attributes.stat(for: node), timeout: timeout)
        }
        guard let reply else {
            logger.debug("entry: a named inode that is gone", metadata: ["ino": "\(ino)"])
            throw FSError.notFound
        }
        return reply
    }

    /// The file name an item shows under in `bucket` (whose format gives entity files their extension).
    func fileName(for item: MountItemName, in bucket: String) -> String {
        FileNameCodec.fileName(for: item, extension: backend.fileExtension(bucket: bucket))
    }

    /// What a file name in `bucket` stands for.
    func itemName(forFileName fileName: String, in bucket: String) -> MountItemName {
        FileNameCodec.itemName(forFileName: fileName, extension: backend.fileExtension(bucket: bucket))
    }

    /// Where bucket directories live: the root, or a group directory (`BucketGroups`).
    enum BucketParent {
        case root
        case group(String)

        var group: String? {
            if case .group(let name) = self { return name }
            return nil
        }
    }

    /// What `directory` is as a place for bucket directories; nil for any other directory.
    func bucketParent(_ directory: UInt64) -> BucketParent? {
        if directory == InodeTable.rootInode { return .root }
        guard case .group(let name)? = state.withLock({ $0.table.node(directory)?.kind }) else { return nil }
        return .group(name)
    }

    /// The bucket a directory inode stands for (files live only in buckets).
    func bucket(of directory: UInt64) throws(FSError) -> String {
        let node = state.withLock { $0.table.node(directory) }
        guard let node else { throw FSError.notFound }
        switch node.kind {
        case .bucket(let name): return name
        case .root, .group: throw FSError.notPermitted
        case .file, .symlink: throw FSError.notDirectory
        case .history: throw FSError.readOnly
        }
    }

    func isLoaded(_ directory: UInt64) -> Bool {
        state.withLock { $0.table.isLoaded(directory) }
    }

    /// Reads a directory's listing from the store if it is not in memory (on `writeQueue`, so it
    /// cannot overwrite a file created meanwhile).
    func loadDirectory(_ directory: UInt64, refresh: Bool = false) throws(FSError) {
        if !refresh, isLoaded(directory) { return }
        let node = state.withLock { $0.table.node(directory) }
        guard let node else { throw FSError.notFound }
        switch node.kind {
        case .root:
            let buckets = try backend.buckets()
            let shown = history != nil
            state.withLock { $0.table.replaceListing(of: directory, with: $0.rootListing(buckets) + $0.historyRoot(shown: shown)) }
        case .group(let group):
            let listing = try backend.buckets().filter { BucketGroups.group(of: $0.name) == group }
                .map { Self.node(for: $0, parent: directory) }
            state.withLock { $0.table.replaceListing(of: directory, with: listing) }
        case .bucket(let name):
            // Each entry becomes its node as it comes (`MountBackend.forEachEntry`).
            let fileExtension = backend.fileExtension(bucket: name)
            var listing: [Node] = []
            var renamed: [Int] = []
            try backend.forEachEntry(bucket: name) { entry in
                if Self.nowStandsForAnEntity(entry.name, fileExtension: fileExtension) != nil { renamed.append(listing.count) }
                listing.append(self.node(for: entry, parent: directory, fileExtension: fileExtension))
            }
            if !renamed.isEmpty { try adoptRenamedNames(at: renamed, of: &listing, in: name, fileExtension: fileExtension) }
            state.withLock { $0.table.replaceListing(of: directory, with: listing) }
            // The table keeps each name's bytes in one buffer; the listing's nodes made a String
            // of each, small blocks in glibc's arenas now free: hand the pages back.
            FreedMemory.afterWork(on: listing.count * 128)
        case .history(let path):
            try loadHistoryDirectory(directory, path)
        case .file, .symlink:
            throw FSError.notDirectory
        }
    }

    /// A store written before entity names read naturally may hold a local file whose name now
    /// stands for a key (`My Note.json` was local, it is now the key `My%20Note`): it becomes
    /// that entity's save, as a scratch file renamed onto it would; if the entity exists, the
    /// file moves aside to `<name>.local` (never lost, never shown twice, never over another).
    private func adoptRenamedNames(
        at places: [Int], of listing: inout [Node], in bucket: String, fileExtension: String
    ) throws(FSError) {
        var names: Set<MountItemName> = []
        for node in listing { if case .file(_, let item) = node.kind { names.insert(item) } }
        for place in places {
            guard case .file(_, let item) = listing[place].kind, let key = Self.nowStandsForAnEntity(item, fileExtension: fileExtension)
            else { continue }
            let fileName = listing[place].fileName
            var destination = MountItemName.entity(key: key)
            var suffix = ".local"
            while names.contains(destination) {
                destination = .localFile(name: fileName + suffix)
                suffix += "~"
            }
            names.insert(destination)
            let moved = try backend.rename(bucket: bucket, from: item, to: destination)
            listing[place] = node(for: moved, parent: listing[place].parent)
            logger.notice(
                "a local file's name now stands for an entity",
                metadata: ["bucket": "\(bucket)", "file": "\(fileName)", "now": "\(self.fileName(for: destination, in: bucket))"])
        }
    }

    /// The key a local file's name stands for now (`adoptRenamedNames`), if it does.
    private static func nowStandsForAnEntity(_ item: MountItemName, fileExtension: String) -> String? {
        guard !fileExtension.isEmpty, case .localFile(let fileName) = item, fileName.hasSuffix("." + fileExtension),
            case .entity(let key) = FileNameCodec.itemName(forFileName: fileName, extension: fileExtension)
        else { return nil }
        return key
    }

    /// Loads a directory on `writeQueue` when needed, then runs `body` (inline if already loaded).
    func withLoadedDirectory(
        _ request: FuseRequest, _ directory: UInt64, _ body: @escaping @Sendable () throws(FSError) -> Void
    ) {
        performInDirectory(request, directory, refresh: false, body)
    }

    /// Runs `body` here when `directory`'s listing is in memory (and no `refresh` is asked), else
    /// on `writeQueue` once it is read. A listing does not leave memory while `body` runs here
    /// (`releaseListing` waits for `requestsInListings`): `body` may find its names.
    func performInDirectory(
        _ request: FuseRequest, _ directory: UInt64, refresh: Bool, _ body: @escaping @Sendable () throws(FSError) -> Void
    ) {
        requestsInListings.add(1, ordering: .sequentiallyConsistent)
        if !refresh, isLoaded(directory) {
            defer { requestsInListings.subtract(1, ordering: .sequentiallyConsistent) }
            do throws(FSError) { try body() } catch { fail(request, error) }
            return
        }
        requestsInListings.subtract(1, ordering: .sequentiallyConsistent)
        perform(request, on: writeQueue) { [self] () throws(FSError) in
            try loadDirectory(directory, refresh: refresh)
            try body()
        }
    }

    /// After the kernel forgot the last node it held in `directory`: a bucket of at least
    /// `MountOptions.releasedListingSize` files leaves memory (`FileSystemState.unloadListing`),
    /// on `writeQueue`, so no store work that loaded it finds it gone. While a request is
    /// answered from a listing in memory, it tries again a moment later.
    func releaseListing(of directory: UInt64) {
        writeQueue.async { [self] in
            let smallest = releasedListingSize
            enum Outcome { case kept, busy, released(Int) }
            let outcome = state.withLock { state -> Outcome in
                guard case .bucket? = state.table.node(directory)?.kind, state.table.isLoaded(directory),
                    !state.table.holdsReferences(in: directory), state.table.childCount(of: directory) >= smallest
                else { return .kept }
                guard requestsInListings.load(ordering: .sequentiallyConsistent) == 0 else { return .busy }
                return state.unloadListing(of: directory).map(Outcome.released) ?? .kept
            }
            switch outcome {
            case .kept: break
            case .busy:
                DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(20)) { [self] in
                    guard session != nil else { return }
                    releaseListing(of: directory)
                }
            case .released(let count):
                logger.debug("a listing left memory", metadata: ["directory": "\(directory)", "files": "\(count)"])
                // Its nodes and names were small blocks in glibc's arenas: hand the pages back.
                FreedMemory.afterWork(on: count * 512)
            }
        }
    }

    /// Checks a name from the kernel (one path component).
    static func validName(_ name: String) throws(FSError) -> String {
        guard !name.isEmpty, name != ".", name != ".." else { throw FSError.invalidArgument }
        guard name.utf8.count <= 255 else { throw FSError.nameTooLong }
        return name
    }
}
