import ArgumentParser
import BucketFS
import Foundation
import JSONDiff
import Logging
import ApptimistClient
import ApptimistCrypto
import SyncClient
import SyncEngine
import SyncProtocol
import SyncStore
import TelepatClient

/// `bucketfs mount`: buckets as directories, entities as JSON files.
struct Mount: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Mount sync buckets at a directory (a local demo server when no --server is given).",
        discussion: """
            With no --server, bucketfs starts its own sync server on loopback, keeps its data under \
            $XDG_DATA_HOME/bucketfs/demo-server, and mounts the bucket `notes` (holding a few sample \
            notes on the first run). With --server it syncs with a Simperium-style server: give \
            --app-id and either --token or --user (the password is read from $BUCKETFS_PASSWORD or \
            standard input).

            Each mount keeps a local SQLite store ($XDG_DATA_HOME/bucketfs/stores), so it works \
            offline and resumes after a crash. Without --foreground the command returns once the \
            file system is mounted and logs to $XDG_STATE_HOME/bucketfs/<name>.log. Unmount with \
            `bucketfs unmount DIR` or `fusermount3 -u DIR`: pending saves are stored first.
            """
    )

    @Argument(help: "An existing, empty directory to mount at.")
    var mountpoint: String

    @Option(
        name: .customLong("protocol"),
        help: "The sync protocol of --server: simperium, telepat (--server http(s)://HOST[:PORT] --app-id ID --api-key KEY, --user or --token, --bucket CONTEXT/MODEL), or apptimist (--server ws://HOST[:PORT]/SERVICE --identity FILE --service-key FILE). Default: a --remote's saved protocol, else simperium.")
    var syncProtocol: SyncProtocolName?

    @Option(help: "With --protocol apptimist: the identity file holding your key pairs (mode 0600, from bucketfs apptimist keygen).")
    var identity: String?

    @Option(
        name: .customLong("service-key"),
        help: "With --protocol apptimist: the service's key document (a file, or the JSON itself: what `bucketfs apptimist service-key` prints and GET /SERVICE answers), pinned: its signature is checked.")
    var serviceKey: String?

    @Option(help: "A remote saved by `bucketfs login NAME` (server, app id and token).")
    var remote: String?

    @Option(help: "Sync server base URL, ws://host:port or wss://host (default: a local demo server). Repeatable: the nodes of one cluster, tried in order; the mount moves to the next when one is unreachable.")
    var server: [String] = []

    @Option(name: .customLong("app-id"), help: "The Simperium app id (with --server).")
    var appID: String?

    @Option(help: "An access token for --server.")
    var token: String?

    @Option(help: "Log in to --server as this user through its auth API (with --api-key).")
    var user: String?

    @Option(name: .customLong("api-key"), help: "The X-Simperium-API-Key for --user.")
    var apiKey: String?

    @Option(
        name: .customLong("auth-url"),
        help: "The auth API's base URL for --user, http(s)://host[:port], when it is not on --server (default: https://auth.simperium.com for wss://api.simperium.com, else --server's own host).")
    var authURL: String?

    @Option(
        name: .customLong("fsync-waits-for-server"),
        help: ArgumentHelp(
            "fsync of a file (or of a bucket directory, for all its files) returns once the server has acknowledged its changes, or fails with EIO after SECONDS (10 when given bare); offline it fails at once. The change stays queued either way.",
            valueName: "SECONDS"))
    var fsyncWaitsForServer: Double?

    @Option(name: .customLong("bucket"), help: "A bucket to mount (repeatable). Default: the buckets mounted here before, or `notes` for the demo.")
    var buckets: [String] = []

    @Option(
        name: .customLong("text-field"),
        help: ArgumentHelp(
            "Show each entity of the bucket as a plain-text file of this string field (<key>.txt, or .EXT), the other fields kept unseen (repeatable; BUCKET: for one bucket, else every bucket).",
            valueName: "[BUCKET:]FIELD[=EXT]"))
    var textFields: [String] = []

    @Option(help: ArgumentHelp("With --text-field: stamp this field with the save time in seconds at every save (modificationDate).", valueName: "[BUCKET:]FIELD"))
    var touch: [String] = []

    @Option(
        name: .customLong("trash-field"),
        help: ArgumentHelp("With --text-field: removing a file sets this field to true instead of removing the entity (deleted); such entities are not shown.", valueName: "[BUCKET:]FIELD"))
    var trashFields: [String] = []

    @Option(help: ArgumentHelp("With --text-field: a JSON object file giving a new file's entity its other fields.", valueName: "[BUCKET:]FILE"))
    var template: [String] = []

    @Option(help: "The local store file (default: one per mount point under $XDG_DATA_HOME/bucketfs/stores).")
    var store: String?

    @Flag(name: .customLong("read-only"), help: "Mount read-only: files can be read, nothing is saved.")
    var readOnly = false

    @Flag(help: "Show earlier versions of every note, read-only, at DIR/.history/<bucket>/<key>/<version>.json (fetched from the server when listed, kept in the store). Off by default: grep -r, rsync and backups of the mount then see each note once.")
    var history = false

    @Flag(help: "Stay in the foreground and log to standard error.")
    var foreground = false

    @Flag(name: .customLong("allow-other"), help: "Let other users access the mount (needs user_allow_other in /etc/fuse.conf).")
    var allowOther = false

    @Flag(name: .customLong("sync-on-every-cpu"), help: "Let the sync work (storing saves, the sync engine, the demo server) run on every CPU. By default, once in sync on a machine with two CPUs or more, it keeps off one of them, which the programs using the mount and the threads answering them then have to themselves.")
    var syncOnEveryCPU = false

    @Flag(name: .shortAndLong, help: "Log more (sync and file-system details).")
    var verbose = false

    @Option(name: .customLong("log-file"), help: "Append the log to this file (default: standard error in the foreground, $XDG_STATE_HOME/bucketfs/<name>.log otherwise).")
    var logFile: String?

    /// Hidden: the whole-system model test sets 1, so every listing the kernel forgets leaves memory.
    @Option(
        name: .customLong("released-listing-size"),
        help: ArgumentHelp(
            "A bucket of at least this many files leaves memory once the kernel forgot all of them (default \(MountOptions.defaultReleasedListingSize)).",
            visibility: .hidden))
    var releasedListingSize: Int?

    /// `--fsync-waits-for-server` may stand alone (the default timeout); argument parsing wants a value.
    static func withFsyncTimeoutSpelledOut(_ arguments: [String]) -> [String] {
        let spelledOut = "--fsync-waits-for-server=\(MountOptions().acknowledgementTimeout)"
        return arguments.map { $0 == "--fsync-waits-for-server" ? spelledOut : $0 }
    }

    func validate() throws {
        if syncProtocol == .apptimist, remote == nil {
            guard server.count == 1, server[0].hasPrefix("ws://") else {
                throw ValidationError("--protocol apptimist takes one --server ws://HOST[:PORT]/SERVICE")
            }
            guard identity != nil, serviceKey != nil else {
                throw ValidationError("--protocol apptimist needs --identity FILE and --service-key FILE")
            }
            guard token == nil, user == nil, appID == nil, authURL == nil, buckets.isEmpty, textFields.isEmpty else {
                throw ValidationError("an Apptimist mount takes --server, --identity and --service-key (its directories are files, messages and outbox)")
            }
            return
        }
        if identity != nil || serviceKey != nil { throw ValidationError("--identity and --service-key go with --protocol apptimist") }
        if syncProtocol == .telepat, remote == nil {
            guard !server.isEmpty else { throw ValidationError("--protocol telepat needs --server (or a --remote saved with bucketfs login --protocol telepat)") }
            guard server.count == 1 else { throw ValidationError("--protocol telepat takes one --server") }
            guard apiKey != nil else { throw ValidationError("--protocol telepat needs --api-key (the application's API key)") }
            guard server.allSatisfy(AuthEndpoint.isHTTP) else { throw ValidationError("a Telepat --server starts with http:// or https://") }
            guard authURL == nil else { throw ValidationError("--auth-url is for Simperium; Telepat logs in on --server") }
        }
        if let fsyncWaitsForServer, !(fsyncWaitsForServer > 0) {
            throw ValidationError("--fsync-waits-for-server takes a number of seconds above 0")
        }
        if remote != nil, !server.isEmpty || token != nil || user != nil || appID != nil || authURL != nil {
            throw ValidationError("--remote replaces --server, --app-id, --token, --user and --auth-url")
        }
        if let authURL {
            guard user != nil else { throw ValidationError("--auth-url goes with --user") }
            guard AuthEndpoint.isHTTP(authURL) else {
                throw ValidationError("--auth-url must start with http:// or https://")
            }
        }
        if !server.isEmpty {
            guard appID != nil else { throw ValidationError("--server needs --app-id") }
            guard (token == nil) != (user == nil) else { throw ValidationError("--server needs exactly one of --token and --user") }
        } else if token != nil || user != nil || appID != nil {
            throw ValidationError("--token, --user and --app-id go with --server")
        }
    }

    func run() async throws {
        let mountpoint = Paths.absolute(self.mountpoint)
        try checkMountpoint(mountpoint)
        if !foreground {
            try Daemon.startInBackground(mountpoint: mountpoint, logFile: logFile.map(Paths.absolute))
            return
        }
        if let logFile {
            // swift-log's default handler writes to standard error: point it at the file.
            let fd = open(logFile, O_WRONLY | O_CREAT | O_APPEND, 0o644)
            guard fd >= 0, dup2(fd, STDERR_FILENO) >= 0 else { throw CommandError("cannot write the log file \(logFile)") }
            close(fd)
        }
        var logger = Logger(label: "bucketfs")
        logger.logLevel = verbose ? .debug : .info
        // The first line of each run in the log: which binary the rest of it comes from.
        logger.info("\(Version.text) mounting at \(mountpoint), pid \(getpid())")
        try await MountSession(command: self, mountpoint: mountpoint, logger: logger).run()
    }

    private func checkMountpoint(_ path: String) throws {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), isDirectory.boolValue else {
            throw CommandError("\(path) is not a directory: create it first (mkdir -p \(path))")
        }
        if isMounted(path) {
            throw CommandError("\(path) is busy: something is already mounted there (bucketfs unmount \(path))")
        }
        if let contents = try? FileManager.default.contentsOfDirectory(atPath: path), !contents.isEmpty {
            throw CommandError("\(path) is not empty: mount on an empty directory so no files are hidden")
        }
        guard FileManager.default.fileExists(atPath: "/dev/fuse") else {
            throw CommandError("/dev/fuse is missing: load the fuse module (modprobe fuse) or install fuse3")
        }
        guard ["/bin/fusermount3", "/usr/bin/fusermount3"].contains(where: FileManager.default.fileExists(atPath:)) else {
            throw CommandError("fusermount3 is missing: install the fuse3 package (apt-get install fuse3)")
        }
    }
}

/// One running mount: the store, the sync engine (and the demo server), and the file system.
private struct MountSession {
    let command: Mount
    let mountpoint: String
    let logger: Logger

    func run() async throws {
        let config = try Config.load()
        let settings = config.mounts[mountpoint]
        let remoteName = command.remote ?? (command.server.isEmpty ? settings?.remote : nil)
        let server: EmbeddedServer?
        let servers: [String]
        let appID: String
        let token: @Sendable () async throws -> String
        var syncProtocol = command.syncProtocol ?? .simperium
        var telepatLogin: TelepatConfiguration.Login?
        var apiKey = command.apiKey
        var (apptimistIdentity, apptimistServiceKey) = (command.identity, command.serviceKey)
        if let remoteName {
            let remote = try config.remote(named: remoteName)
            if let asked = command.syncProtocol, asked != remote.syncProtocol {
                throw CommandError("remote \(remoteName) speaks \(remote.syncProtocol.rawValue), not \(asked.rawValue)")
            }
            syncProtocol = remote.syncProtocol
            server = nil
            (servers, appID, apiKey) = (remote.servers, remote.appID, remote.apiKey)
            if syncProtocol == .apptimist {
                (apptimistIdentity, apptimistServiceKey) = (remote.identity, remote.serviceKey)
            }
            let stored = syncProtocol == .apptimist ? "" : try CredentialStore.token(forRemote: remoteName)
            token = { stored }
            if syncProtocol == .telepat {
                // A running mount renews its token; a saved one that has expired needs a login.
                if let expiry = TelepatLogin.expiry(of: stored), expiry <= Date() {
                    throw CommandError("the saved token of remote \(remoteName) expired at \(expiry): run bucketfs login \(remoteName)")
                }
                telepatLogin = .token(stored)
            }
        } else if syncProtocol == .apptimist {
            server = nil
            (servers, appID) = (command.server, "")
            token = { @Sendable in throw CommandError("not a Simperium mount") }
        } else if !command.server.isEmpty, let app = command.appID {
            server = nil
            (servers, appID) = (command.server, app)
            // Telepat's engine logs in itself (and again when the server refuses its token).
            if syncProtocol == .simperium {
                token = try await remoteToken(servers: servers, appID: app)
            } else {
                token = { @Sendable in throw CommandError("not a Simperium mount") }
            }
        } else {
            let started = try await EmbeddedServer.start(dataDirectory: Paths.dataDirectory + "/demo-server", logger: logger)
            server = started
            (servers, appID) = ([started.url], EmbeddedServer.appID)
            let demoToken = started.token
            token = { demoToken }
        }

        let storePath = command.store.map(Paths.absolute) ?? Paths.dataDirectory + "/stores/\(Paths.mountName(for: mountpoint)).sqlite"
        try Paths.createDirectory((storePath as NSString).deletingLastPathComponent)
        let store: SyncStore
        do { store = try SyncStore(path: storePath) } catch { throw CommandError("cannot open the store \(storePath): \(error)") }

        var buckets = command.buckets
        if syncProtocol == .apptimist { buckets = ApptimistBuckets.all }
        if buckets.isEmpty { buckets = settings?.buckets ?? [] }
        if buckets.isEmpty { buckets = (try? store.buckets().map(\.name)) ?? [] }
        if buckets.isEmpty && server != nil { buckets = ["notes"] }
        // A Telepat mount with none named mirrors every model the application declares.
        guard !buckets.isEmpty || syncProtocol == .telepat else {
            throw CommandError("name the buckets to mount with --bucket NAME")
        }
        let textViews = try TextViewSettings.resolve(
            buckets: buckets,
            configured: (remoteName.flatMap { config.remotes[$0]?.text } ?? [:]).merging(settings?.text ?? [:]) { $1 },
            textFields: command.textFields, touch: command.touch, trashFields: command.trashFields, templates: command.template)
        for bucket in buckets where syncProtocol != .apptimist {
            // Each mount says how its buckets show; a bucket shown differently before is rendered again.
            do { try store.setFileFormat(try textViews[bucket]?.format(), forBucket: bucket) } catch let error as StoreError {
                throw CommandError("cannot set how bucket \(bucket) shows: \(error)")
            }
        }

        let client: any SyncEngine
        switch syncProtocol {
        case .simperium:
            let configuration = SyncClientConfiguration(
                servers: servers, appID: appID, buckets: buckets,
                clientID: "bucketfs-\(Paths.mountName(for: mountpoint))", token: token)
            let simperium = try SyncClient(configuration: configuration, store: store, logger: logger)
            if let server, server.isNew, buckets.contains("notes") {
                for (key, note) in SampleNotes.all {
                    _ = try await simperium.save(bucket: "notes", key: key, value: note)
                }
            }
            client = simperium
        case .telepat:
            client = try telepatEngine(
                serverURL: servers[0], appID: appID, apiKey: apiKey ?? "", login: try telepatLogin ?? commandLineTelepatLogin(),
                buckets: buckets, store: store, savingTokensTo: telepatLogin == nil ? nil : remoteName)
        case .apptimist:
            client = try apptimistEngine(serverURL: servers[0], identity: apptimistIdentity, serviceKey: apptimistServiceKey, store: store)
        }
        let wantsHistory = command.history || settings?.history == true
        if wantsHistory, client.versionHistory == nil {
            throw CommandError("--history needs a protocol that keeps versions (\(syncProtocol.rawValue) keeps none)")
        }
        try? Paths.createDirectory(Paths.stateDirectory)
        let record = MountRecord(
            mountpoint: mountpoint, server: servers[0], servers: servers.count > 1 ? servers : nil,
            serverPosition: servers.count > 1 ? 1 : nil, appID: appID, store: storePath, buckets: buckets,
            pid: getpid(), startedAt: Date(), connection: .init(state: "starting"))
        // Written before the mount shows, as the pid file is: `bucketfs mount DIR && bucketfs
        // status DIR` finds it, before the engine reports its first connection state.
        record.save()
        let feed = FeedWriter(path: MountRecord.feedPath(for: mountpoint))
        let acknowledgements = command.fsyncWaitsForServer.map { _ in StoreAcknowledgements(store: store) }
        await client.start()
        let control = startControlSocket(client: client, store: store)
        // mkdir and rmdir at the root reach the engine in the order they happened.
        let (bucketEdits, bucketEditsInput) = AsyncStream<BucketEdit>.makeStream()
        let localSaves = LocalSaveQueue()
        // Files opened for writing reach the engine in the background: a FUSE request never waits
        // for it. Only Apptimist has locks to take; the other protocols are not told.
        let (writeOpens, writeOpensInput) = AsyncStream<OpenedFile>.makeStream()
        let tellsOpens = syncProtocol == .apptimist
        let onOpenedForWriting: @Sendable (String, String) -> Void = { bucket, key in
            if tellsOpens { writeOpensInput.yield(OpenedFile(bucket: bucket, key: key)) }
        }
        let reporters = [
            Task { await reportConnection(client, record: record, acknowledgements: acknowledgements) },
            Task { await reportRemoteChanges(store, feed: feed, titled: Set(textViews.keys)) },
            Task { await reportProgress(client) },
            Task { await reportAuthFailures(client, record: record) },
            Task { await applyBucketEdits(bucketEdits, to: client, logger: logger) },
            Task { for await opened in writeOpens { await client.openedForWriting(bucket: opened.bucket, key: opened.key) } },
            Task { await sendLocalSaves(localSaves, to: client, feed: feed, store: store, titled: Set(textViews.keys)) },
        ]

        let backend = SyncStoreBackend(
            store: store, logger: logger,
            // The tests' small size (`BUCKETFS_PARSE_LATER_FROM`) sends their small notes this way too.
            parsingLaterFrom: ProcessInfo.processInfo.environment["BUCKETFS_PARSE_LATER_FROM"].flatMap(Int.init)
                ?? SyncStoreBackend.parsedLaterFrom,
            onBucketCreated: { bucketEditsInput.yield(.created($0)) },
            onBucketRemoved: { bucketEditsInput.yield(.removed($0)) },
            onOpenedForWriting: onOpenedForWriting,
            onOutgoing: localSaves.add
        )
        let fileSystem = BucketFileSystem(backend: backend, logger: logger)
        var fuseOptions: [String] = []
        if command.readOnly || settings?.readOnly == true { fuseOptions.append("ro") }
        if command.allowOther { fuseOptions.append("allow_other") }
        // Written before the mount shows: `bucketfs mount` returns as soon as it does, and
        // whatever runs next (unmount, status, a test) finds the process behind it.
        let pidFile = Paths.pidFile(for: mountpoint)
        try? "\(getpid())\n".write(toFile: pidFile, atomically: true, encoding: .utf8)
        do {
            var options = MountOptions(handleSignals: true, fuseOptions: fuseOptions, serverAcknowledgement: acknowledgements)
            if let seconds = command.fsyncWaitsForServer { options.acknowledgementTimeout = seconds }
            if let size = command.releasedListingSize { options.releasedListingSize = max(size, 1) }
            if wantsHistory, let versions = client.versionHistory {
                options.history = StoreHistory(fetcher: HistoryFetcher(client: versions, store: store), timeout: .seconds(10))
            }
            try fileSystem.mount(at: mountpoint, options: options)
        } catch {
            try? FileManager.default.removeItem(atPath: pidFile)
            throw CommandError("cannot mount at \(mountpoint): \(error)")
        }
        logger.info("mounted \(buckets.joined(separator: ", ")) at \(mountpoint) (server \(servers.joined(separator: ", ")), store \(storePath))")

        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            // The FUSE loop blocks its thread until unmount; it gets one of its own.
            Thread.start(named: BucketFileSystem.ThreadName.session) {
                fileSystem.run()
                done.resume()
            }
        }
        logger.info("unmounted \(mountpoint); sending what is pending")
        if !(await client.waitUntilIdle(timeout: .seconds(5))) {
            logger.notice("some saves are still pending: they are stored and are sent at the next mount")
        }
        control?.stop()
        for reporter in reporters { reporter.cancel() }
        await client.stop()
        await server?.stop()
        try? FileManager.default.removeItem(atPath: pidFile)
        var stopped = record
        stopped.connection = .init(state: "unmounted", since: Date())
        stopped.save()
    }

    /// `--token`, or `--user` with its password (kept for re-logins while the mount runs).
    private func commandLineTelepatLogin() throws -> TelepatConfiguration.Login {
        if let token = command.token { return .token(token) }
        guard let user = command.user else { throw CommandError("--protocol telepat needs --user or --token") }
        return .password(username: user, password: try Credentials.readPassword(prompt: "Password for \(user): "))
    }

    /// - Parameter remote: the saved remote whose credentials get each renewed token, so the
    ///   next mount of it starts with a token that has not expired.
    private func telepatEngine(
        serverURL: String, appID: String, apiKey: String, login: TelepatConfiguration.Login, buckets: [String], store: SyncStore,
        savingTokensTo remote: String?
    ) throws -> TelepatClient {
        var configuration = TelepatConfiguration(serverURL: serverURL, appID: appID, apiKey: apiKey, login: login, buckets: buckets)
        if let remote {
            let logger = logger
            configuration.tokenRenewed = { token in
                do { try CredentialStore.store(token: token, forRemote: remote) } catch {
                    logger.warning("cannot save the renewed token of remote \(remote): \(error)")
                }
            }
        }
        do { return try TelepatClient(configuration: configuration, store: store, logger: logger) } catch {
            throw CommandError("cannot start the Telepat engine: \(error)")
        }
    }

    /// The Apptimist engine of `--identity` and `--service-key` (its buckets show bytes, not JSON).
    private func apptimistEngine(serverURL: String, identity: String?, serviceKey: String?, store: SyncStore) throws -> ApptimistClient {
        guard let identityPath = identity, let serviceKey else {
            throw CommandError("--protocol apptimist needs --identity FILE and --service-key FILE")
        }
        do {
            let identity = try ApptimistIdentity(file: Paths.absolute(identityPath))
            let document = FileManager.default.contents(atPath: Paths.absolute(serviceKey)) ?? Data(serviceKey.utf8)
            let service = try ApptimistServiceKey(json: document)
            let configuration = ApptimistConfiguration(serverURL: serverURL, identity: identity, service: service)
            return try ApptimistClient(configuration: configuration, store: store, logger: logger)
        } catch {
            throw CommandError("cannot start the Apptimist engine: \(error)")
        }
    }

    /// One token for all `servers` (the nodes of one cluster share their accounts).
    private func remoteToken(servers: [String], appID: String) async throws -> @Sendable () async throws -> String {
        if let token = command.token { return { token } }
        guard let user = command.user else { throw CommandError("--server needs --token or --user") }
        let password = try Credentials.readPassword(prompt: "Password for \(user): ")
        let token = try await AuthAPI.authorize(
            servers: servers, authURL: command.authURL, appID: appID, apiKey: command.apiKey ?? appID, username: user, password: password)
        return { token }
    }

    /// The door for `bucketfs history` and `bucketfs sync` (ControlSocket.swift); the mount works
    /// without it, and an engine whose protocol keeps no versions opens none.
    private func startControlSocket(client: any SyncEngine, store: SyncStore) -> ControlServer? {
        guard let versions = client.versionHistory else { return nil }
        let fetcher = HistoryFetcher(client: versions, store: store)
        do {
            return try ControlServer(mountpoint: mountpoint) { request in
                switch request.operation {
                case .fetchHistory: return await fetcher.handle(request)
                case .inSync: return ControlReply(inSync: await client.isIdle())
                }
            }
        } catch {
            logger.warning("bucketfs history cannot ask the server through this mount: \(error)")
            return nil
        }
    }

    /// Logs connection changes and keeps the mount record (for `bucketfs status`) current.
    private func reportConnection(_ client: any SyncEngine, record: MountRecord, acknowledgements: StoreAcknowledgements?) async {
        var record = record
        for await state in client.connectionStates() {
            switch state {
            case .connected: acknowledgements?.connectionChanged(connected: true, reason: "")
            case .offline(_, _, let reason): acknowledgements?.connectionChanged(connected: false, reason: reason)
            case .stopped, .connecting: acknowledgements?.connectionChanged(connected: false, reason: "not connected")
            }
            switch state {
            case .stopped: record.connection = .init(state: "stopped", since: Date())
            case .connecting(let attempt): record.connection = .init(state: "connecting", since: Date(), reason: "attempt \(attempt)")
            case .connected:
                record.connection = .init(state: "connected", since: Date())
                if let current = client.currentServer {
                    if record.servers != nil, current.url != record.server {
                        logger.notice("moved to server \(current.description) (from \(record.server))")
                    }
                    record.server = current.url
                    record.serverPosition = record.servers == nil ? nil : current.position
                }
                logger.info("connected to \(record.serverDescription)")
            case .offline(let since, let retryAt, let reason):
                record.connection = .init(state: "offline", since: since, retryAt: retryAt, reason: reason)
                logger.warning("offline: \(reason)")
            }
            record.save()
        }
    }

    /// A refused token is the one failure that needs the user: say what to do, in the log and status.
    private func reportAuthFailures(_ client: any SyncEngine, record: MountRecord) async {
        var record = record
        for await failure in client.authFailures() {
            let message = "the server refused access to bucket \(failure.bucket): \(failure.failure); "
                + "mount again with a fresh --token (or bucketfs login)"
            logger.error("\(message)")
            record.connection = .init(state: "unauthorized", since: Date(), reason: message)
            record.save()
        }
    }

    /// A bucket made with mkdir starts syncing; one removed with rmdir (the store has forgotten
    /// it already) stops.
    private func applyBucketEdits(_ edits: AsyncStream<BucketEdit>, to client: any SyncEngine, logger: Logger) async {
        for await edit in edits {
            switch edit {
            case .created(let bucket):
                do { try await client.addBucket(bucket) } catch { logger.error("cannot sync the new bucket \(bucket): \(error)") }
            case .removed(let bucket):
                await client.stopSyncing(bucket)
            }
        }
    }

    /// Hands the mount's saves to the engine (and to `bucketfs watch`), a batch at a time.
    /// `titled`: the buckets shown as plain text, whose events carry the note's title.
    private func sendLocalSaves(_ saves: LocalSaveQueue<ContinuousClock>, to client: any SyncEngine, feed: FeedWriter, store: SyncStore, titled: Set<String>) async {
        var names = EntityNames(store: store)
        await saves.forEachBatch { changes in
            for change in changes {
                let kind = if case .remove = change.operation { "removed" } else { change.sourceVersion == nil ? "created" : "changed" }
                feed.append(FeedEvent(
                    time: Date(), bucket: change.bucket, key: change.key, version: change.sourceVersion,
                    origin: "local", kind: kind,
                    title: titled.contains(change.bucket) ? names.title(bucket: change.bucket, key: change.key) : nil))
            }
            await client.send(changes)
        }
    }

    /// Feeds `bucketfs watch` with every change the server makes to the store.
    private func reportRemoteChanges(_ store: SyncStore, feed: FeedWriter, titled: Set<String>) async {
        var names = EntityNames(store: store)
        // One write to the feed per transaction: a first sync's index page is one.
        for await events in store.remoteEventBatches() {
            let time = Date()
            feed.append(events.map { event in
                let version = event.version ?? (try? store.entity(bucket: event.bucket, key: event.key))??.version
                let title = titled.contains(event.bucket) ? names.title(bucket: event.bucket, key: event.key) : nil
                let kind = switch event.kind {
                case .created: "created"
                case .changed: "changed"
                case .removed: "removed"
                }
                return FeedEvent(
                    time: time, bucket: event.bucket, key: event.key, version: version, origin: "remote", kind: kind,
                    client: event.clientID, title: title)
            })
        }
    }

    /// First-sync progress: a live line on a terminal, a log line per bucket otherwise.
    private func reportProgress(_ client: any SyncEngine) async {
        let bar = ProgressBar(enabled: isatty(STDERR_FILENO) == 1)
        var placed = false
        for await progress in client.progress() {
            if progress.isReady {
                bar.finish("\(progress.bucket): \(progress.entitiesDone) entities in sync")
                logger.info("\(progress.bucket): in sync (\(progress.entitiesDone) entities)")
                // After the first sync, which has work enough for every CPU; again at each
                // reconnection, for threads started meanwhile.
                if !command.syncOnEveryCPU, let cpu = CPUPlacement.keepSyncWorkOffOneCPU(), !placed {
                    logger.info("sync work keeps off CPU \(cpu), left to the file system's requests (--sync-on-every-cpu: not)")
                    placed = true
                }
            } else {
                bar.update(label: progress.bucket, done: progress.entitiesDone, total: progress.entitiesKnown, bytes: progress.bytesReceived)
            }
        }
    }
}

/// The notes a newcomer finds in the demo, in Simplenote's note shape.
enum SampleNotes {
    /// A note in Simplenote's shape (`bucketfs seed` makes its notes with it too).
    static func note(_ content: String, tags: [String], created: Double, modified: Double) -> JSONObject {
        [
            "content": .string(content),
            "tags": .array(tags.map(JSONValue.string)),
            "systemTags": .array([]),
            "creationDate": .double(created),
            "modificationDate": .double(modified),
            "deleted": .bool(false),
        ]
    }

    static var all: [(String, JSONObject)] {
        let now = Date().timeIntervalSince1970
        func note(_ content: String, tags: [String]) -> JSONObject {
            Self.note(content, tags: tags, created: now, modified: now)
        }
        return [
            ("welcome", note("Welcome to bucketfs\n\nEvery note is a JSON file. Edit the \"content\" with any editor; saving sends the change to the sync server.\n", tags: ["bucketfs"])),
            ("shopping-list", note("Shopping\n\n- oat milk\n- coffee\n- apples\n", tags: ["home"])),
            ("ideas", note("Ideas\n\ngrep -r across every note, rsync them for backups, and watch changes arrive from other machines.\n", tags: ["work", "ideas"])),
        ]
    }
}

/// The sync protocol a mount speaks: one engine each, behind the SyncEngine seam.
enum SyncProtocolName: String, ExpressibleByArgument, CaseIterable, Codable, Sendable {
    case simperium
    case telepat
    case apptimist
}

/// mkdir or rmdir of a bucket at the mount root.
private enum BucketEdit: Sendable {
    case created(String)
    case removed(String)
}

/// An entity file the mount opened for writing.
private struct OpenedFile: Sendable {
    let bucket: String
    let key: String
}
