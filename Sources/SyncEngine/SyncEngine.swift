import SyncStore

/// What a mount needs of a sync engine, whatever its wire protocol (Simperium: SyncClient;
/// Telepat: TelepatClient). The store is the source of truth on both sides of this seam: the
/// file system saves into it and hands the engine the resulting outgoing changes; the engine
/// applies what the server sends to it, records what the server took, and reports how it goes.
/// Local work never waits for the engine: saves are durable before they reach it.
public protocol SyncEngine: AnyObject, Sendable {
    /// Starts connecting (and reconnecting) in the background; idempotent.
    func start() async
    /// Closes the connection and stops reconnecting; what is owed stays in the store.
    func stop() async

    /// Sends changes the store has recorded (a batch of the mount's saves), now if connected,
    /// else once connected: the engine finds them in the store again after a reconnect.
    func send(_ changes: [OutgoingChange]) async

    /// Starts syncing a bucket the store holds now (mkdir at the mount root).
    func addBucket(_ name: String) async throws
    /// Stops syncing a bucket the store has forgotten already (rmdir at the mount root).
    func stopSyncing(_ name: String) async

    /// A file of the mount was opened for writing (or created): an engine whose protocol reserves
    /// a file before it is written (Apptimist's LOCK) does so now, in the background. Called off
    /// the file system's request path; the save that follows goes through `send` as always.
    func openedForWriting(bucket: String, key: String) async

    /// Skips the current reconnect delay (e.g. the network came back).
    func reconnectNow() async

    /// Whether every bucket is in sync with nothing owed to the server.
    func isIdle() async -> Bool

    /// The connection state now and on every change.
    func connectionStates() -> AsyncStream<ConnectionState>
    /// First-sync progress per bucket.
    func progress() -> AsyncStream<SyncProgress>
    /// Buckets the server refused access to: the one failure that needs the user.
    func authFailures() -> AsyncStream<BucketAuthFailure>

    /// The server the engine is on now (or last tried), of the ones it was given: a mount
    /// given several nodes of one cluster moves between them. Nil: the engine does not say.
    var currentServer: ServerInUse? { get }

    /// The server's kept versions of entities, when the protocol has any (Simperium does,
    /// Telepat keeps none): nil when it does not.
    var versionHistory: (any EntityVersionFetching)? { get }
}

extension SyncEngine {
    public var versionHistory: (any EntityVersionFetching)? { nil }
    public var currentServer: ServerInUse? { nil }
    /// Most protocols have no locks: opening a file tells the server nothing.
    public func openedForWriting(bucket: String, key: String) async {}

    /// Waits until `isIdle()` (or the timeout); true if idle.
    public func waitUntilIdle(timeout: Duration) async -> Bool {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if await isIdle() { return true }
            try? await Task.sleep(for: .milliseconds(20))
        }
        return await isIdle()
    }
}

/// The optional capability of fetching an entity's earlier versions from the server
/// (`bucketfs history`, the `.history` view). The replies are history: the store is not changed.
public protocol EntityVersionFetching: Sendable {
    /// The versions asked for, each with its data, or with none when the server no longer keeps it.
    func fetchVersions(bucket: String, key: String, versions: [Int], timeout: Duration) async throws -> [EntityVersion]
}
