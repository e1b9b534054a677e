import Foundation
import JSONDiff
import Logging
import SyncEngine
import SyncProtocol
import SyncStore

/// The sync engine: one WebSocket, one channel per bucket, the store as the source of truth.
/// Local saves are durable before they return and are sent when the channel is in sync;
/// remote changes are applied to the store and published as events. Works fully offline.
public actor SyncClient: SyncEngine {
    let configuration: SyncClientConfiguration
    /// The local store (reads for the file system go straight to it: no actor hop).
    public nonisolated let store: SyncStore
    let logger: Logger

    var machines: [BucketMachine]
    var channelsByBucket: [String: Int] = [:]
    var connection: OpenConnection?
    var connectionCounter = 0
    var loopTask: Task<Void, Never>?
    var wakeUp: CheckedContinuation<Void, Never>?
    var running = false
    var remoteLogLevel = 0
    /// 405 refusals per ccid, to fall back to sending the whole object (spec 405, option 2).
    var badVersionCounts: [String: Int] = [:]
    /// The resend delay of each change the server refused for now (5xx), until it is acknowledged.
    var serverErrorBackoffs: [String: Backoff] = [:]
    /// Buckets whose stored change version may stand past a change the store could not take
    /// (`serverDataNotStored`): they load the index again instead of resuming from it.
    var untrustedChangeVersions: Set<String> = []
    /// 401 refusals per ccid: a second, after authorizing anew, keeps the change locally.
    var unauthorizedCounts: [String: Int] = [:]
    /// ccids written on the current connection and not answered yet (a sent change is not
    /// resent on it unless requeued); at most `maxChangesInFlight` of them.
    var sentOnConnection: Set<String> = []
    /// Buckets with queued changes held back by a full window (`maxChangesInFlight`).
    var heldBack: Set<String> = []
    /// Channels of removed buckets: never authorized again, their messages ignored (channel
    /// numbers are positions, so the slot stays).
    var removedChannels: Set<Int> = []

    /// `bucketfs history`'s fetches of kept versions, waiting for their `e` replies.
    var versionFetches = VersionFetches()

    let stateBroadcaster = Broadcaster<ConnectionState>(initial: .stopped)
    let serverBroadcaster: Broadcaster<ServerInUse>
    let progressBroadcaster = Broadcaster<SyncProgress>()
    let authFailureBroadcaster = Broadcaster<BucketAuthFailure>()
    let acknowledgementBroadcaster = Broadcaster<ChangeAcknowledgement>(replaysLatest: false)

    /// An open WebSocket: its writer and heartbeat state.
    struct OpenConnection {
        let id: Int
        let writer: WebSocketWriting
        var heartbeat: Heartbeat
        var authorizedAny = false
        /// Set when something the server sent could not be stored: the connection is closing,
        /// and nothing more it brings is taken (`serverDataNotStored`).
        var storeFailure: String?
    }

    /// Creates the engine over `store`; every configured bucket is added to the store.
    public init(configuration: SyncClientConfiguration, store: SyncStore, logger: Logger = Logger(label: "bucketfs.sync")) throws(SyncClientError) {
        guard !configuration.servers.isEmpty else { throw .invalidConfiguration("no server URL") }
        for server in configuration.servers where !(server.hasPrefix("ws://") || server.hasPrefix("wss://")) {
            throw .invalidConfiguration("server URL must start with ws:// or wss://")
        }
        var machines: [BucketMachine] = []
        for (channel, bucket) in configuration.buckets.enumerated() {
            guard BucketName.isValid(bucket) else { throw .invalidConfiguration("invalid bucket name \(bucket)") }
            do { _ = try store.ensureBucket(bucket) } catch { throw .store(error) }
            machines.append(BucketMachine(channel: channel, bucket: bucket, pageLimit: configuration.indexPageLimit))
        }
        self.configuration = configuration
        self.store = store
        self.logger = logger
        self.machines = machines
        // A large note's change too big for any message is refused as the store queues it, not
        // read back, marked sent and refused here.
        store.refuseChanges(largerThan: configuration.maxChangeFrameBytes)
        serverBroadcaster = Broadcaster(initial: ServerInUse(url: configuration.servers[0], position: 1, count: configuration.servers.count))
        for machine in machines { channelsByBucket[machine.bucket] = machine.channel }
    }

    // MARK: - Lifecycle

    /// Starts connecting (and reconnecting) in the background; idempotent.
    public func start() {
        guard !running else { return }
        running = true
        loopTask = Task { await self.connectionLoop() }
    }

    /// Closes the connection and stops reconnecting. Local saves keep working (store only).
    public func stop() async {
        running = false
        let task = loopTask
        loopTask = nil
        if let connection { await connection.writer.close() }
        wake()
        task?.cancel()
        await task?.value
        stateBroadcaster.publish(.stopped)
    }

    /// Starts syncing another bucket (mkdir at the mount root) on a new channel, at once if connected.
    public func addBucket(_ name: String) async throws(SyncClientError) {
        guard channelsByBucket[name] == nil else { return }
        guard BucketName.isValid(name) else { throw .invalidConfiguration("invalid bucket name \(name)") }
        do { _ = try store.ensureBucket(name) } catch { throw .store(error) }
        let channel = machines.count
        machines.append(BucketMachine(channel: channel, bucket: name, pageLimit: configuration.indexPageLimit))
        channelsByBucket[name] = channel
        if connection != nil { await authorize(channel: channel) }
    }

    /// Stops syncing a bucket and forgets it locally (rmdir at the mount root); refused with
    /// `StoreError.bucketNotEmpty` while it holds entities or local files. The server keeps its data.
    public func removeBucket(_ name: String) async throws(SyncClientError) {
        do { try store.removeBucket(named: name) } catch { throw .store(error) }
        stopSyncing(name)
    }

    /// Stops syncing a bucket whose store rows are gone already (the file system removed it in
    /// the store's transaction); the channel's later messages are ignored.
    public func stopSyncing(_ name: String) {
        guard let channel = channelsByBucket.removeValue(forKey: name) else { return }
        removedChannels.insert(channel)
    }

    /// The buckets this client syncs, by channel.
    public var buckets: [String] { activeMachines.map(\.bucket) }

    /// The machines of the buckets still synced (a removed bucket's slot stays).
    var activeMachines: [BucketMachine] { machines.filter { !removedChannels.contains($0.channel) } }

    /// Skips the current reconnect delay (e.g. the network came back).
    public func reconnectNow() {
        wake()
    }

    // MARK: - File system API

    /// The bytes of an entity's file, from the store (never the network).
    public nonisolated func read(bucket: String, key: String) throws(SyncClientError) -> [UInt8]? {
        do { return try store.readEntity(bucket: bucket, key: key) } catch { throw .store(error) }
    }

    /// The bucket's directory listing, from the store.
    public nonisolated func list(bucket: String) throws(SyncClientError) -> [DirectoryEntry] {
        do { return try store.entries(bucket: bucket) } catch { throw .store(error) }
    }

    /// Saves new file bytes; returns once durable in the store (the send happens after).
    public func save(bucket: String, key: String, bytes: [UInt8]) async throws(SyncClientError) -> SaveResult {
        let result: SaveResult
        // Nothing suspends between this check and `send`: the change goes out on this connection.
        let goesOutNow = liveChannel(of: bucket) != nil && roomInFlight > 0
        do { result = try store.saveLocal(bucket: bucket, key: key, bytes: bytes, markingSent: goesOutNow) } catch { throw .store(error) }
        if let change = result.readyToSend { await send([change]) }
        return result
    }

    /// Saves a JSON object (rendered in the bucket's file format); returns once durable.
    public func save(bucket: String, key: String, value: JSONObject) async throws(SyncClientError) -> SaveResult {
        let result: SaveResult
        let goesOutNow = liveChannel(of: bucket) != nil && roomInFlight > 0
        do { result = try store.saveLocal(bucket: bucket, key: key, value: value, markingSent: goesOutNow) } catch { throw .store(error) }
        if let change = result.readyToSend { await send([change]) }
        return result
    }

    /// Edits an entity's value atomically against what the store holds now (no stale read).
    public func modify(bucket: String, key: String, _ edit: (JSONObject?) throws -> JSONObject) async throws(SyncClientError) -> SaveResult {
        let result: SaveResult
        do { result = try store.modifyLocal(bucket: bucket, key: key, edit) } catch { throw .store(error) }
        if let change = result.readyToSend { await send([change]) }
        return result
    }

    /// Deletes an entity; returns once durable (the removal is sent after).
    public func delete(bucket: String, key: String) async throws(SyncClientError) {
        let change: OutgoingChange?
        do { change = try store.deleteLocal(bucket: bucket, key: key) } catch { throw .store(error) }
        if let change { await send([change]) }
    }

    /// Renames within a bucket (see `SyncStore.rename`); returns once durable.
    public func rename(bucket: String, from source: EntryName, to target: EntryName) async throws(SyncClientError) {
        let renamed: RenameResult
        do { renamed = try store.rename(bucket: bucket, from: source, to: target) } catch { throw .store(error) }
        await send(renamed.changes)
    }

    /// Entities changed by the server, after the store committed them.
    public nonisolated func remoteEvents() -> AsyncStream<RemoteEvent> { store.remoteEvents() }

    /// Local changes the server acknowledged, after the store recorded them (each save's
    /// `readyToSend.ccid` identifies its change; coalesced saves ride on a later ccid).
    public nonisolated func acknowledgements() -> AsyncStream<ChangeAcknowledgement> { acknowledgementBroadcaster.stream() }

    /// The connection state now and on every change.
    public nonisolated func connectionStates() -> AsyncStream<ConnectionState> { stateBroadcaster.stream() }

    /// The current connection state.
    public nonisolated var connectionState: ConnectionState { stateBroadcaster.latest ?? .stopped }

    /// The server connected to now, or being tried (the first before `start()`). Set before
    /// `.connected` is published, so a reader of that state finds the server it is about.
    public nonisolated var currentServer: ServerInUse? { serverBroadcaster.latest }

    /// First-sync progress per bucket.
    public nonisolated func progress() -> AsyncStream<SyncProgress> { progressBroadcaster.stream() }

    /// Channels the server refused to authorize (bad token vs other causes).
    public nonisolated func authFailures() -> AsyncStream<BucketAuthFailure> { authFailureBroadcaster.stream() }

    /// Whether every bucket is in sync with nothing owed to the server.
    public func isIdle() -> Bool {
        let active = activeMachines
        guard connection != nil, active.allSatisfy(\.isReady) else { return false }
        for machine in active {
            guard let owed = try? store.outgoingChanges(bucket: machine.bucket), owed.isEmpty,
                let reloads = try? store.pendingReloads(bucket: machine.bucket), reloads.isEmpty,
                machine.requestedEntities.isEmpty
            else { return false }
        }
        return true
    }

    /// Waits until the server has acknowledged the entity's current local value (the mount
    /// option where fsync waits for the server), or it was refused, or `timeout` passed.
    /// Returns the entity's state then (`synced` on success); nil if the entity is unknown.
    public nonisolated func waitUntilAcknowledged(bucket: String, key: String, timeout: Duration) async -> EntityState? {
        let deadline = ContinuousClock.now + timeout
        while true {
            guard let entity = try? store.entity(bucket: bucket, key: key) else { return nil }
            switch entity.state {
            case .synced, .rejected, .invalid:
                return entity.state
            case .pending, .conflict:
                if ContinuousClock.now >= deadline { return entity.state }
            }
            try? await Task.sleep(for: .milliseconds(10))
        }
    }

    /// The phase of a bucket's channel, for status and tests.
    public func phaseDescription(bucket: String) -> String? {
        guard let channel = channelsByBucket[bucket] else { return nil }
        return String(describing: machines[channel].phase)
    }

    func wake() {
        let continuation = wakeUp
        wakeUp = nil
        continuation?.resume()
    }
}
