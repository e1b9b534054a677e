import Foundation
import HummingbirdWSClient
import JSONDiff
import Logging
import SyncEngine
import SyncStore
import TelepatProtocol

/// The Telepat engine: device registration, login, one subscription per model, the Engine.IO 3
/// socket for notifications, saves as `/object/create`, `/object/update` and `/object/delete`.
/// The store is the source of truth, as for every engine: saves are durable before they get
/// here and are sent (again) once the engine is connected and subscribed.
public actor TelepatClient: SyncEngine {
    public nonisolated let store: SyncStore
    let configuration: TelepatConfiguration
    let http: TelepatHTTP
    let mirror: TelepatMirror
    let logger: Logger

    var buckets: [String: TelepatBucket] = [:]
    /// Context ids by name (`/context/all`), fetched at each connection.
    var contextIDs: [String: String] = [:]
    var token: String?
    var deviceID: String?
    /// Buckets subscribed on the current connection (their notifications apply, their saves go).
    var subscribed: Set<String> = []
    /// Creates sent whose object has not arrived yet, by bucket.
    var pendingCreates: [String: [PendingCreate]] = [:]
    var connected = false
    var running = false
    var loopTask: Task<Void, Never>?
    var wakeUp: CheckedContinuation<Void, Never>?
    var closeConnection: (@Sendable () async -> Void)?
    /// A save in flight: sends run one at a time, in order.
    var sending = false
    /// A send asked for while one was running: it goes round once more.
    var flushAgain = false

    struct PendingCreate: Sendable {
        let change: OutgoingChange
        let content: JSONObject
    }

    let stateBroadcaster = Broadcaster<ConnectionState>(initial: .stopped)
    let progressBroadcaster = Broadcaster<SyncProgress>()
    let authFailureBroadcaster = Broadcaster<BucketAuthFailure>()

    static let deviceSetting = "telepat.device_id"

    public init(configuration: TelepatConfiguration, store: SyncStore, logger: Logger = Logger(label: "bucketfs.telepat")) throws {
        guard configuration.serverURL.hasPrefix("http://") || configuration.serverURL.hasPrefix("https://") else {
            throw TelepatCallError.unreachable("the Telepat server URL must start with http:// or https://")
        }
        var buckets: [String: TelepatBucket] = [:]
        for name in configuration.buckets {
            guard let bucket = TelepatBucket(name) else {
                throw TelepatCallError.unreachable("a Telepat bucket is CONTEXT/MODEL, not \(name)")
            }
            _ = try store.ensureBucket(name)
            buckets[name] = bucket
        }
        self.configuration = configuration
        self.store = store
        self.http = TelepatHTTP(configuration: configuration)
        self.mirror = TelepatMirror(store: store)
        self.logger = logger
        self.buckets = buckets
        if case .token(let given) = configuration.login { token = given }
    }

    // MARK: - SyncEngine

    public func start() {
        guard !running else { return }
        running = true
        loopTask = Task { await self.connectionLoop() }
    }

    public func stop() async {
        running = false
        let task = loopTask
        loopTask = nil
        await closeConnection?()
        wake()
        task?.cancel()
        await task?.value
        stateBroadcaster.publish(.stopped)
    }

    public func send(_ changes: [OutgoingChange]) async {
        guard connected else { return }
        await flush()
    }

    public func addBucket(_ name: String) async throws {
        guard buckets[name] == nil else { return }
        guard let bucket = TelepatBucket(name) else { throw TelepatCallError.unreachable("a Telepat bucket is CONTEXT/MODEL, not \(name)") }
        _ = try store.ensureBucket(name)
        buckets[name] = bucket
        if connected { await subscribe(bucket) }
    }

    public func stopSyncing(_ name: String) async {
        guard buckets.removeValue(forKey: name) != nil else { return }
        subscribed.remove(name)
    }

    public func reconnectNow() { wake() }

    public func isIdle() -> Bool {
        guard connected, subscribed.count == buckets.count else { return false }
        for name in buckets.keys {
            guard let owed = try? store.outgoingChanges(bucket: name), owed.allSatisfy({ isRefusedOrWaitingForCreate($0) }) else {
                return false
            }
        }
        return pendingCreates.values.allSatisfy(\.isEmpty)
    }

    public nonisolated func connectionStates() -> AsyncStream<ConnectionState> { stateBroadcaster.stream() }
    public nonisolated func progress() -> AsyncStream<SyncProgress> { progressBroadcaster.stream() }
    public nonisolated func authFailures() -> AsyncStream<BucketAuthFailure> { authFailureBroadcaster.stream() }

    private func isRefusedOrWaitingForCreate(_ change: OutgoingChange) -> Bool {
        if case .rejected = change.state { return true }
        return false
    }

    func wake() {
        let continuation = wakeUp
        wakeUp = nil
        continuation?.resume()
    }
}
