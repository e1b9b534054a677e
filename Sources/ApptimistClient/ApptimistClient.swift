import ApptimistCrypto
import ApptimistProtocol
import Foundation
import JSONDiff
import Logging
import SyncEngine
import SyncStore

/// The Apptimist engine: one WebSocket to the service, LOGIN with the user's signed key, the
/// user's files (READ at each connection, LOCK and WRITE for a save, REMOVE), the message stream
/// (MESSAGE in, replayed from the last one seen; TRUNCATE), and the outbox (MESSAGE out). The
/// store is the source of truth, as for every engine: saves are durable before they get here
/// and are sent (again) once connected.
public actor ApptimistClient: SyncEngine {
    public nonisolated let store: SyncStore
    nonisolated let configuration: ApptimistConfiguration
    let mirror: CountedVersionMirror
    let logger: Logger
    let address: ApptimistSocket.Address
    static let fileFormat = BytesFieldFormat(readOnlyKeys: Set(ApptimistBuckets.reservedFiles))
    static let messageFormat = BytesFieldFormat(readOnly: true)

    var running = false
    var loopTask: Task<Void, Never>?
    var wakeUp: CheckedContinuation<Void, Never>?
    /// The open connection: its channel (sealing state) and writer; nil while offline.
    var connection: Connection?
    /// The service echoed this connection's LOGIN.
    var loggedInNow = false
    var afterLoginTask: Task<Void, Never>?
    /// Files read since the connection opened (idle waits for them).
    var refreshed = false
    var sending = false
    /// This connection's sequence ran out: it is opened again at once, with a fresh device key.
    var sequenceRanOut = false
    /// Outbox changes whose MESSAGEs went on the current connection.
    var sentOnThisConnection: Set<String> = []
    /// The ids of the MESSAGEs sent on the current connection not echoed yet, and the outbox
    /// file each was sent from: an echo finds its file at once.
    var outboxSent: [String: String] = [:]
    var flushAgain = false
    /// Files opened for writing whose LOCK is to be taken (keys, in the order opened).
    var locksWanted: [String] = []
    /// Locks this connection holds, by key, since when: a save of one sends WRITE without
    /// LOCKing again while it lasts.
    var heldLocks: [String: ContinuousClock.Instant] = [:]
    /// Files (keys) service notices named whose bytes are to be READ (kept in the store).
    var filesToRead: [String]
    /// Requests waiting for their answer, by the answer they wait for.
    var waiters: [AnswerKey: [AsyncThrowingStream<ApptimistAnswer, Error>.Continuation]] = [:]

    struct Connection {
        var channel: ApptimistChannel
        let writer: ApptimistSocketWriter
    }

    let stateBroadcaster = Broadcaster<ConnectionState>(initial: .stopped)
    let progressBroadcaster = Broadcaster<SyncProgress>()
    let authFailureBroadcaster = Broadcaster<BucketAuthFailure>()

    static let headSetting = "apptimist.head"
    static let versionSetting = "apptimist.version"
    static let filesToReadSetting = "apptimist.files-to-read"

    public init(configuration: ApptimistConfiguration, store: SyncStore, logger: Logger = Logger(label: "bucketfs.apptimist")) throws {
        address = try ApptimistSocket.Address(url: configuration.serverURL)
        for bucket in ApptimistBuckets.all {
            try store.setFileFormat(bucket == ApptimistBuckets.messages ? Self.messageFormat : Self.fileFormat, forBucket: bucket)
        }
        self.configuration = configuration
        self.store = store
        mirror = CountedVersionMirror(store: store)
        self.logger = logger
        filesToRead = Self.filesToRead(in: store)
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
        await connection?.writer.close()
        wake()
        task?.cancel()
        await task?.value
        stateBroadcaster.publish(.stopped)
    }

    public func send(_ changes: [OutgoingChange]) async {
        guard connection != nil else { return }
        await flush()
    }

    public func addBucket(_ name: String) async throws {
        guard ApptimistBuckets.all.contains(name) else {
            throw ApptimistEngineError.configuration("an Apptimist mount holds files, messages and outbox only, not \(name)")
        }
    }

    public func stopSyncing(_ name: String) async {}

    /// A file opened for writing is LOCKed at once when connected, before any save (issue #18);
    /// offline nothing is taken: the save LOCKs when it is sent.
    public func openedForWriting(bucket: String, key: String) async {
        guard bucket == ApptimistBuckets.files, connection != nil, refreshed else { return }
        if !locksWanted.contains(key) { locksWanted.append(key) }
        // Not awaited: the next open is taken in while this LOCK waits for its answer.
        Task { await self.flush() }
    }

    public func reconnectNow() { wake() }

    public func isIdle() -> Bool {
        guard loggedInNow, refreshed, !sending, locksWanted.isEmpty, filesToRead.isEmpty else { return false }
        for bucket in ApptimistBuckets.all {
            guard let owed = try? store.outgoingChanges(bucket: bucket) else { return false }
            // An outbox message sent waits for its echo; a refusal waits for the user.
            if owed.contains(where: { change in
                if case .rejected = change.state { return false }
                return true
            }) { return false }
        }
        return true
    }

    public nonisolated func connectionStates() -> AsyncStream<ConnectionState> { stateBroadcaster.stream() }
    public nonisolated func progress() -> AsyncStream<SyncProgress> { progressBroadcaster.stream() }
    public nonisolated func authFailures() -> AsyncStream<BucketAuthFailure> { authFailureBroadcaster.stream() }

    public nonisolated var currentServer: ServerInUse? { ServerInUse(url: configuration.serverURL, position: 1, count: 1) }

    func wake() {
        let continuation = wakeUp
        wakeUp = nil
        continuation?.resume()
    }

    func sleepUnlessWoken(_ delay: Duration) async {
        let sleeper = Task { try? await Task.sleep(for: delay); self.wake() }
        await withCheckedContinuation { continuation in
            if !running { continuation.resume() } else { wakeUp = continuation }
        }
        sleeper.cancel()
    }
}

/// What a request waits for: an answer PDU of its type about its file (or message id).
struct AnswerKey: Hashable {
    let type: ApptimistPDUType
    let subject: [UInt8]
}

/// A request sent, its answer to come: one at most, or the connection's end, or the timeout's.
struct PendingAnswer {
    let type: ApptimistPDUType
    let answers: AsyncThrowingStream<ApptimistAnswer, Error>
    let timer: Task<Void, Error>

    func answer() async throws -> ApptimistAnswer {
        defer { timer.cancel() }
        for try await answer in answers { return answer }
        throw ApptimistEngineError.connection("the connection ended before the answer to \(type)")
    }

    /// Not awaited after all (the connection went, or an earlier answer failed).
    func cancel() { timer.cancel() }
}

/// An answer to a file request: its error code (0: done) and its opened data.
struct ApptimistAnswer: Sendable {
    let error: UInt16
    let data: [UInt8]

    /// The service's description of an error, as text.
    var reason: String {
        let text = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        return text.isEmpty ? "error \(error)" : "error \(error): \(text)"
    }
}
