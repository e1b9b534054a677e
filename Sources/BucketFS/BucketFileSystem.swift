import CFuse
import ChildProcesses
import Dispatch
import Foundation
import Glibc
import Logging
import Synchronization
import SyncStore

/// How the mount behaves.
public struct MountOptions: Sendable {
    /// Seconds the kernel may cache names and attributes; remote changes invalidate them explicitly.
    public var cacheTimeout: Double
    /// On SIGTERM, SIGINT or SIGHUP: save buffered writes and unmount (the command line sets it).
    public var handleSignals: Bool
    /// Extra `-o` options passed to libfuse (for example `allow_other`).
    public var fuseOptions: [String]
    /// libfuse debug output on stderr.
    public var debug: Bool
    /// The largest file the mount keeps, in bytes: a write or truncate past it fails with EFBIG
    /// before anything is allocated. A large file's working copy is kept in a temporary file on
    /// the store's disk, not in memory, so the limit is the disk's, not the mount's memory.
    public var maxFileSize: Int
    /// The largest entity (`.json`) file: an entity's bytes are parsed and held whole, and the
    /// server takes none past 4 MiB, so its limit is far lower (EFBIG past it, also for a rename
    /// of a larger scratch file onto a `.json` name). Never above `SyncStore.entityFileLimit`.
    public var maxEntityFileSize: Int
    /// When set, fsync of an entity file (and of a bucket directory) also waits for the
    /// server's acknowledgement, up to `acknowledgementTimeout` seconds, else fails with EIO
    /// (the change stays queued, nothing is lost).
    public var serverAcknowledgement: (any ServerAcknowledgement)?
    public var acknowledgementTimeout: Double
    /// When set, the read-only view `.history/<bucket>/<key>/<version>.json` of the versions the
    /// server keeps (`bucketfs mount --history`); off by default, so `grep -r`, rsync and
    /// backups of the mount see each note once.
    public var history: (any MountHistory)?
    /// A bucket directory of at least this many files leaves memory once the kernel has
    /// forgotten every one of them (it does under memory pressure, or after `drop_caches`): the
    /// next lookup or listing reads it from the store again. Smaller ones stay for the mount's life.
    public var releasedListingSize: Int = MountOptions.defaultReleasedListingSize

    /// 4 GiB for local (scratch) files: room for disk images, archives and build outputs.
    public static let defaultMaxFileSize = 4 << 30
    /// 16 MiB for entity files: four times what the server takes (a larger one is kept locally,
    /// `rejected:413`), and a size the mount can parse in memory.
    public static let defaultMaxEntityFileSize = SyncStore.entityFileLimit
    /// A listing this long costs about 4 MB of memory (issue 40: ~900 bytes per file) and a few
    /// milliseconds to read again.
    public static let defaultReleasedListingSize = 4096

    public init(
        cacheTimeout: Double = 3600, handleSignals: Bool = false, fuseOptions: [String] = [], debug: Bool = false,
        maxFileSize: Int = MountOptions.defaultMaxFileSize, serverAcknowledgement: (any ServerAcknowledgement)? = nil,
        acknowledgementTimeout: Double = 10, maxEntityFileSize: Int = MountOptions.defaultMaxEntityFileSize
    ) {
        self.cacheTimeout = cacheTimeout
        self.handleSignals = handleSignals
        self.fuseOptions = fuseOptions
        self.debug = debug
        self.maxFileSize = maxFileSize
        self.maxEntityFileSize = min(maxEntityFileSize, SyncStore.entityFileLimit)
        self.serverAcknowledgement = serverAcknowledgement
        self.acknowledgementTimeout = acknowledgementTimeout
    }
}

/// The FUSE file system: buckets as directories, entities as `<key>.json` files (DESIGN.md,
/// "The file system contract"), on libfuse's low-level API with its multi-threaded loop.
///
/// Use: `mount(at:options:)`, then `run()` (blocks until unmounted, then flushes pending saves),
/// or `start()` to run the loop on its own thread; `unmount()` from anywhere.
///
/// Behaviour beyond DESIGN.md (README, "What POSIX behaviour the mount keeps"): files up to
/// `MountOptions.maxFileSize` (entity files `maxEntityFileSize`), EFBIG past it; permission bits (chmod) and access times are
/// stored with a file (defaults 0644, mtime), a bucket's live for the mount's life (0755);
/// chown only to the current owner; hard links,
/// fifos and devices are EPERM; rmdir of a bucket the backend still holds anything of is
/// ENOTEMPTY (after waiting a little for removals the server has not confirmed); rename between
/// buckets is EXDEV (mv copies instead); symlinks exist only for local-only names (emacs locks)
/// and only while mounted; file times live in the backend, directory times for the mount's life.
public final class BucketFileSystem: Sendable {
    let backend: any MountBackend
    let logger: Logger
    let attributes: Attributes
    let state: Mutex<FileSystemState>
    /// Backend reads that do not change anything (file bytes, xattrs).
    let readQueue = WorkQueue(name: ThreadName.readQueue, threads: 4)
    /// Every store mutation and directory load, in order, so a save never races a listing or
    /// an older save of the same file.
    let writeQueue = WorkQueue(name: ThreadName.writeQueue, threads: 1)
    /// Where a large file's save streams its bytes to the store before `writeQueue` commits them
    /// in one short step: a long save never holds up requests for other files.
    let streamQueue = WorkQueue(name: ThreadName.streamQueue, threads: 2)
    /// Where the remote-change feed is consumed.
    let changeExecutor = ThreadTaskExecutor(name: "bucketfs-changes")
    private let lifecycle = Mutex<Lifecycle>(Lifecycle())
    private let stoppedCondition = NSCondition()
    /// Read requests of files answered so far: the kernel's page cache answers the rest.
    let readsAnswered = Atomic<Int>(0)
    /// Requests being answered from a directory's listing in memory (`performInDirectory`):
    /// while any is, no listing leaves memory (`releaseListing`).
    let requestsInListings = Atomic<Int>(0)

    /// The names of the threads that answer requests (`CPUPlacement` tells them by these).
    public enum ThreadName {
        /// Where `run()` goes: libfuse's workers are started from it and carry its name.
        public static let session = "bucketfs-session"
        static let readQueue = "bucketfs-read"
        static let writeQueue = "bucketfs-write"
        static let streamQueue = "bucketfs-stream"
        /// The kernel's names for them (`comm`: their first 15 bytes; a queue's workers add a number).
        static let answeringRequests = [session, readQueue, writeQueue, streamQueue].map { String($0.utf8.prefix(15))! }
    }

    struct Lifecycle: @unchecked Sendable {
        var session: OpaquePointer?
        var mountPoint: String?
        var options = MountOptions()
        var notifier: InvalidationNotifier?
        var changeTask: Task<Void, Never>?
        var running = false
        /// The session loop has returned (the connection is over); saves may still be flushing.
        var loopEnded = false
        var stopped = false
        /// Detached by `unmount()` (`fusermount3 -uz`): there is nothing left for libfuse to unmount.
        var detached = false
        var signalSources: [any DispatchSourceSignal] = []
        var userData: Unmanaged<BucketFileSystem>?
    }

    /// A file system over `backend`; nothing is mounted yet.
    public init(backend: any MountBackend, logger: Logger = Logger(label: "bucketfs.fuse")) {
        self.backend = backend
        self.logger = logger
        self.attributes = Attributes(uid: getuid(), gid: getgid())
        self.state = Mutex(FileSystemState(rootTime: Attributes.now()))
    }

    var cacheTimeout: Double { lifecycle.withLock { $0.options.cacheTimeout } }

    var maxFileSize: Int { lifecycle.withLock { $0.options.maxFileSize } }

    var releasedListingSize: Int { lifecycle.withLock { $0.options.releasedListingSize } }

    /// The size limit of a file with this name: scratch files `maxFileSize`, entity files
    /// `maxEntityFileSize` (whichever is lower).
    func sizeLimit(of item: MountItemName) -> Int {
        sizeLimits.limit(of: item)
    }

    /// Both limits at once, read before taking the state lock (never inside it).
    var sizeLimits: SizeLimits {
        lifecycle.withLock { SizeLimits(file: $0.options.maxFileSize, entity: min($0.options.maxFileSize, $0.options.maxEntityFileSize)) }
    }

    struct SizeLimits {
        let file: Int
        let entity: Int

        func limit(of item: MountItemName) -> Int { item.isLocalFile ? file : entity }
    }

    /// Past this size a local file's working copy leaves memory for a temporary file (`SpillFile`).
    var spillThreshold: Int { backend.chunkSize }

    /// fsync's wait for the server, when the mount was asked for it.
    var acknowledgement: (waiter: any ServerAcknowledgement, timeout: Double)? {
        lifecycle.withLock { life in life.options.serverAcknowledgement.map { ($0, life.options.acknowledgementTimeout) } }
    }

    /// The `.history` view's source, when the mount shows it.
    var history: (any MountHistory)? { lifecycle.withLock { $0.options.history } }

    var session: OpaquePointer? { lifecycle.withLock { $0.session } }

    /// Mounts at `path` (an existing empty directory); requests are served once `run()` starts.
    public func mount(at path: String, options: MountOptions = MountOptions()) throws(FSError) {
        try backend.prepareForMount()
        let buckets = try backend.buckets()
        state.withLock { state in
            let listing = state.rootListing(buckets) + state.historyRoot(shown: options.history != nil)
            state.table.replaceListing(of: InodeTable.rootInode, with: listing)
        }
        var arguments = ["bucketfs"]
        // noatime: the kernel would otherwise keep access times of its own in its inode cache
        // (relatime), which the store never hears of; a file's atime is what touch -a sets.
        var fuseOptions = ["fsname=bucketfs", "subtype=bucketfs", "noatime"] + options.fuseOptions
        // Only the mounting user reaches the files unless allow_other is set, and for that user
        // the fixed modes (0644, 0755) allow everything: the kernel's checks matter only for
        // others. Without them it need not fetch a directory's attributes again after every
        // create, rename or unlink in it.
        if options.fuseOptions.contains("allow_other") { fuseOptions.append("default_permissions") }
        if options.debug { arguments.append("-d") }
        fuseOptions = fuseOptions.filter { !$0.isEmpty }
        arguments += ["-o", fuseOptions.joined(separator: ",")]

        let userData = Unmanaged.passRetained(self)
        var operations = FuseCallbacks.operations()
        let session: OpaquePointer? = withFuseArguments(arguments) { args in
            fuse_session_new(args, &operations, MemoryLayout<fuse_lowlevel_ops>.size, userData.toOpaque())
        }
        guard let session else {
            userData.release()
            throw FSError.io("fuse_session_new failed (bad options: \(fuseOptions))")
        }
        guard fuse_session_mount(session, path) == 0 else {
            fuse_session_destroy(session)
            userData.release()
            throw FSError.io("cannot mount at \(path) (is /dev/fuse available and the directory empty?)")
        }
        let signalSources = options.handleSignals ? installSignalHandlers() : []
        let notifier = InvalidationNotifier(session: session)
        notifier.start()
        lifecycle.withLock { life in
            life.session = session
            life.mountPoint = path
            life.options = options
            life.notifier = notifier
            life.signalSources = signalSources
            life.userData = userData
            life.running = true
        }
        let changes = backend.remoteChanges()
        let task = Task(executorPreference: changeExecutor) { [weak self] in
            for await batch in changes {
                guard let self else { return }
                self.writeQueue.async { self.applyRemoteChanges(batch) }
            }
        }
        lifecycle.withLock { $0.changeTask = task }
        logger.info("mounted", metadata: ["path": "\(path)"])
    }

    /// Serves requests until the file system is unmounted (`fusermount3 -u`, `unmount()`, or a
    /// signal when `handleSignals` is set); then saves what is still buffered and tears down.
    public func run() {
        guard let session else { return }
        let result = cfuse_session_loop_mt(session, 10)
        lifecycle.withLock { $0.loopEnded = true }
        if result != 0 { logger.debug("fuse loop ended", metadata: ["result": "\(result)"]) }
        flushAll()
        let life = lifecycle.withLock { life -> Lifecycle in
            let copy = life
            life.session = nil
            life.notifier = nil
            life.changeTask = nil
            life.userData = nil
            return copy
        }
        life.changeTask?.cancel()
        life.notifier?.stop()
        readQueue.stop()
        streamQueue.stop()
        writeQueue.stop()
        changeExecutor.stop()
        Self.removeSignalHandlers(life.signalSources)
        if !life.detached { fuse_session_unmount(session) }
        fuse_session_destroy(session)
        life.userData?.release()
        logger.info("unmounted", metadata: ["path": "\(life.mountPoint ?? "")"])
        stoppedCondition.lock()
        lifecycle.withLock {
            $0.running = false
            $0.stopped = true
        }
        stoppedCondition.broadcast()
        stoppedCondition.unlock()
    }

    /// Runs the loop on its own thread (for embedding and tests); returns at once.
    public func start() {
        Thread.start(named: ThreadName.session) { [self] in run() }
    }

    /// Unmounts and waits up to `timeout` for `run()` to end; returns whether it ended.
    ///
    /// If the mount is busy (open files), buffered writes are saved to the store first, the name
    /// is detached (`fusermount3 -uz`), the connection aborted where fusectl allows, and the loop
    /// told to end: files still open elsewhere then fail with ENOTCONN instead of keeping the
    /// process alive until they are closed.
    @discardableResult
    public func unmount(timeout: Double = 10) -> Bool {
        let (running, mountPoint) = lifecycle.withLock { ($0.running, $0.mountPoint) }
        guard running, let mountPoint else { return true }
        // Opened before any umount, while the number is surely ours: a connection that ends lends
        // its number to the next mount, but this handle stays with ours (see ConnectionAbort).
        let abort = ConnectionAbort(mountedAt: mountPoint)
        if Self.fusermount(["-u", mountPoint]) {
            // A copy of the mount in another mount namespace (`unshare -m` copies every mount
            // there is) outlives our umount, and the loop ends only with the connection.
            if !waitUntilStopped(timeout: min(timeout, 2)), !lifecycle.withLock({ $0.loopEnded }), let abort, abort.connectionLives {
                logger.notice("the mount lives on elsewhere (another mount namespace); ending its connection", metadata: ["path": "\(mountPoint)"])
                abort.abort()
            }
        } else {
            flushAll()
            // Taken before the detach (the name is gone after it); O_PATH sends no open request.
            let root = Glibc.open(mountPoint, Self.openPathOnly | O_DIRECTORY)
            if Self.fusermount(["-uz", mountPoint]) { lifecycle.withLock { $0.detached = true } }
            abort?.abort()
            endLoop(through: root)
            if root >= 0 { Glibc.close(root) }
        }
        return waitUntilStopped(timeout: timeout)
    }

    /// Ends the session loop of a detached mount. libfuse's workers only look at the exit flag
    /// after a request, so one is sent through `root`: statfs, which the kernel never caches and
    /// `statfs(_:ino:)` answers on the worker itself (nothing is left in flight afterwards).
    private func endLoop(through root: Int32) {
        guard let session else { return }
        fuse_session_exit(session)
        guard root >= 0 else { return }
        var ignored = statvfs()
        // ENOTCONN once the connection is aborted: the loop has ended on its own then.
        _ = fstatvfs(root, &ignored)
    }

    /// Linux's O_PATH (a descriptor that names a file without opening it); Glibc's Swift module
    /// does not export it.
    private static let openPathOnly: Int32 = 0o10000000

    /// What SIGTERM, SIGINT and SIGHUP do when `handleSignals` is set: saves every buffered write
    /// to the store, then unmounts (lazily, if files are still open) without waiting; `run()` then
    /// returns. Safe from any thread but the file system's own.
    public func terminate() {
        flushAll()
        unmount(timeout: 0)
    }

    /// Waits for `run()` to finish; false on timeout.
    public func waitUntilStopped(timeout: Double) -> Bool {
        let deadline = Date(timeIntervalSinceNow: timeout)
        stoppedCondition.lock()
        defer { stoppedCondition.unlock() }
        while lifecycle.withLock({ $0.running && !$0.stopped }) {
            if !stoppedCondition.wait(until: deadline) { return lifecycle.withLock { $0.stopped } }
        }
        return true
    }

    /// libfuse's own handlers only set an exit flag, which the loop notices when a request arrives
    /// or the signal happens to hit the loop's thread; a signal source plus an unmount always ends
    /// the loop, from whichever thread the signal was delivered to.
    private func installSignalHandlers() -> [any DispatchSourceSignal] {
        [SIGTERM, SIGINT, SIGHUP].map { number in
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { [weak self] in
                guard let self else { return }
                logger.info("signal received, unmounting", metadata: ["signal": "\(number)"])
                terminate()
            }
            source.resume()
            return source
        }
    }

    private static func removeSignalHandlers(_ sources: [any DispatchSourceSignal]) {
        for source in sources {
            source.cancel()
            signal(Int32(source.handle), SIG_DFL)
        }
    }

    /// Saves every dirty buffer (unmount, signals), waits for queued store writes and makes
    /// them all survive a power loss.
    func flushAll() {
        let dirty = state.withLock { state in state.openFiles.filter { $0.value.dirty }.map(\.key) }
        for ino in dirty {
            writeQueue.async { [self] in
                do { try saveIfDirty(ino) } catch { logger.error("save at unmount failed", metadata: ["ino": "\(ino)", "error": "\(error)"]) }
            }
        }
        writeQueue.async { [self] in
            do throws(FSError) { try backend.settle() } catch {
                logger.error("sync at unmount failed", metadata: ["error": "\(error)"])
            }
        }
        writeQueue.drain()
    }

    func notify(_ items: [Invalidation]) {
        lifecycle.withLock { $0.notifier }?.enqueue(items)
    }

    /// Whether the kernel may still cache an old size for the inode it calls `ino`.
    func kernelMayHoldAnOldSize(of ino: UInt64) -> Bool {
        lifecycle.withLock { $0.notifier }?.isOnItsWay(ino) ?? false
    }

    /// A bucket's directory: at the root, or inside its group's (`BucketGroups`).
    static func node(for bucket: MountBucket, parent: UInt64) -> Node {
        Node(
            ino: bucket.id, parent: parent, fileName: FileNameCodec.encode(BucketGroups.leaf(of: bucket.name)),
            kind: .bucket(name: bucket.name), size: 0, mtime: bucket.ctime, ctime: bucket.ctime)
    }

    /// `fileExtension`: the bucket's, when the caller has it (`loadDirectory`: asking the
    /// backend may read the store, which its listing holds a transaction on).
    func node(for entry: MountEntry, parent: UInt64, fileExtension: String? = nil) -> Node {
        let fileName = fileExtension.map { FileNameCodec.fileName(for: entry.name, extension: $0) }
            ?? fileName(for: entry.name, in: entry.bucket)
        return Node(
            ino: entry.id, parent: parent, fileName: fileName,
            kind: .file(bucket: entry.bucket, item: entry.name), size: entry.size, mtime: entry.mtime,
            ctime: entry.ctime, atime: entry.atime, permissions: entry.permissions.map { mode_t($0 & 0o777) })
    }

    private static func fusermount(_ arguments: [String]) -> Bool {
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/fusermount3")
        process.arguments = arguments
        process.standardError = FileHandle.nullDevice
        do { try process.run() } catch { return false }
        process.waitUntilExit()
        return process.terminationStatus == 0
    }

    /// The mount's device ("major:minor") from /proc/self/mountinfo; reading it never touches the mount.
    /// The FUSE device (`major:minor`) mounted at `mountPoint`, if one is.
    public static func fuseDevice(of mountPoint: String) -> String? {
        let resolved = URL(fileURLWithPath: mountPoint).standardizedFileURL.path
        for fields in mountInfo().reversed() where fields.count > 4 && (fields[4] == resolved || fields[4] == mountPoint) {
            return String(fields[2])
        }
        return nil
    }

    /// The lines of /proc/self/mountinfo, each split into its fields (field 2 the device, 4 the
    /// mount point); empty when it cannot be read.
    private static func mountInfo() -> [[Substring]] {
        guard let text = ProcFile.text("/proc/self/mountinfo") else { return [] }
        return text.split(separator: "\n").map { $0.split(separator: " ") }
    }
}

/// The means to end one FUSE connection (its fusectl `abort` file, opened while the connection
/// is known to be ours): pending and future requests then fail with ENOTCONN.
///
/// Without it a detached connection whose loop has ended lives on while any process holds
/// its device: a child forked (and not yet exec'd) while the mount was served holds it, and
/// its close of a file there waits for an answer that never comes.
///
/// Why a handle and not the path at the time of need: once a connection ends (its last mount
/// gone), its number goes to the next FUSE mount, and `/sys/fs/fuse/connections/<n>/abort`
/// then ends that one: a test's fresh mount failed with "Transport endpoint is not connected"
/// when another mount's unmount, slow on a busy machine, aborted "its" number. An open handle
/// stays with the connection it was opened on: the kernel detaches the file from the
/// connection when it ends, and a later write does nothing.
public final class ConnectionAbort {
    private let descriptor: Int32
    private let path: String

    /// Opens the abort file of connection `device` ("major:minor"); nil where fusectl is not
    /// there to mount, or the connection is gone. Mounts fusectl if nothing has (containers and
    /// minimal systems; systemd mounts it at boot).
    public init?(device: String) {
        guard let minor = device.split(separator: ":").last else { return nil }
        let connections = "/sys/fs/fuse/connections"
        path = "\(connections)/\(minor)/abort"
        if access(path, F_OK) != 0 { _ = Glibc.mount("fusectl", connections, "fusectl", 0, nil) }
        descriptor = Glibc.open(path, O_WRONLY | O_CLOEXEC)
        if descriptor < 0 { return nil }
    }

    /// The abort file of the connection mounted at `mountPoint`; nil when nothing is mounted
    /// there (or as `init(device:)`). Open it before the umount: the name is gone from
    /// mountinfo after it, and the number may go to the next mount.
    public convenience init?(mountedAt mountPoint: String) {
        guard let device = BucketFileSystem.fuseDevice(of: mountPoint) else { return nil }
        self.init(device: device)
    }

    deinit { Glibc.close(descriptor) }

    /// Whether the connection is still there: its abort file is the one this handle holds (a
    /// later connection with the same number has a file of its own, another inode).
    public var connectionLives: Bool {
        var held = stat(), current = stat()
        return fstat(descriptor, &held) == 0 && stat(path, &current) == 0 && held.st_ino == current.st_ino
    }

    /// Ends the connection, if it is still there.
    public func abort() {
        _ = "1".withCString { Glibc.write(descriptor, $0, 1) }
    }
}

/// Builds a `fuse_args` whose strings live for the duration of `body`.
private func withFuseArguments<T>(_ arguments: [String], _ body: (UnsafeMutablePointer<fuse_args>) -> T) -> T {
    var cStrings = arguments.map { strdup($0) }
    defer { cStrings.forEach { free($0) } }
    return cStrings.withUnsafeMutableBufferPointer { buffer in
        var args = fuse_args(argc: Int32(buffer.count), argv: buffer.baseAddress, allocated: 0)
        let result = body(&args)
        fuse_opt_free_args(&args)
        return result
    }
}
