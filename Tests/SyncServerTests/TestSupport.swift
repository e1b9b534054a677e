import Foundation
import Hummingbird
import HummingbirdTesting
import HummingbirdWSClient
import JSONDiff
import Logging
import NIOCore
import NIOSSL
import SyncProtocol
import PostgresTestSupport
@testable import SyncServer
import Testing

/// How long any single await on the network may take before the test fails. A hang guard only:
/// generous so that a loaded machine (the whole suite on 2 cores) never trips it; speed is
/// measured by the benchmarks, never asserted by tests.
let messageTimeout: Duration = .seconds(30)

/// The longest a test may wait for something that must eventually happen (a close, a drain).
let hangGuard: Duration = .seconds(60)

/// An `e` reply without the time the server accepted the version (issue 17) and the ccid of the
/// change that made it (issue 34), which replies with data carry: for comparing replies whole.
func withoutVersionFacts(_ frame: String) -> String {
    frame.replacingOccurrences(of: #",\"accepted_at\":[0-9.eE+-]+"#, with: "", options: .regularExpression)
        .replacingOccurrences(of: #",\"ccid\":\"[^\"]*\""#, with: "", options: .regularExpression)
}

/// A temporary data directory, removed by `remove()`.
struct TemporaryDirectory: Sendable {
    let path: String

    init() throws {
        let base = FileManager.default.temporaryDirectory.appendingPathComponent("bucketfs-server-tests-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: base, withIntermediateDirectories: true)
        path = base.path
    }

    func remove() {
        try? FileManager.default.removeItem(atPath: path)
    }
}

/// The store behind a test server: suites that hold for both run once per store.
enum StoreKind: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case sqlite
    case postgres

    var testDescription: String { rawValue }
}

/// A running server on 127.0.0.1 with a random port.
struct RunningServer: Sendable {
    let port: Int
    let store: any ServerStorage
    let client: any TestClientProtocol

    /// The SQLite store, for tests of its file.
    var sqliteStore: ServerStore {
        get throws { try #require(store as? ServerStore) }
    }

    func socket(appID: String = "test-app", messageLimit: Int = 1 << 26) async throws -> TestSocket {
        try await TestSocket.connect(port: port, appID: appID, messageLimit: messageLimit)
    }
}

/// Low PBKDF2 cost in tests; the default cost is exercised in `AuthAPITests`.
let testPasswordIterations = 1_000

/// Runs `body` against a live server over the store in `directory` (a fresh temp dir if nil),
/// or over a fresh database of the test cluster (`.postgres`).
func withServer<T: Sendable>(
    store kind: StoreKind = .sqlite,
    directory: TemporaryDirectory? = nil,
    configure: (inout ServerConfiguration) -> Void = { _ in },
    _ body: @Sendable (RunningServer) async throws -> T
) async throws -> T {
    switch kind {
    case .sqlite:
        let temporary = try directory ?? TemporaryDirectory()
        defer { if directory == nil { temporary.remove() } }
        let store = try ServerStore(directory: temporary.path, passwordIterations: testPasswordIterations)
        return try await withServer(storage: store, configure: configure, body)
    case .postgres:
        let cluster = try await PostgresCluster.running()
        let database = try await cluster.createDatabase()
        do {
            var logger = Logger(label: "test-postgres")
            logger.logLevel = .warning
            // Waits as long as a loaded machine needs for the pool's first connections (many
            // suites open theirs at once; with two CPU-bound processes beside the tests, 30 s
            // was not enough): a hang guard, not a speed claim.
            let store = try await PostgresServerStore.open(
                cluster.location(database: database), passwordIterations: testPasswordIterations, startWait: .seconds(300),
                logger: logger)
            defer { store.close() }
            let result = try await withServer(storage: store, configure: configure, body)
            await cluster.dropDatabase(database)
            return result
        } catch {
            await cluster.dropDatabase(database)
            throw error
        }
    }
}

/// Runs `body` against a live server over `store`.
func withServer<T: Sendable>(
    storage store: any ServerStorage,
    configure: (inout ServerConfiguration) -> Void = { _ in },
    _ body: @Sendable (RunningServer) async throws -> T
) async throws -> T {
    var configuration = ServerConfiguration(host: "127.0.0.1", port: 0)
    // The test client keeps one HTTP connection for the whole test and does not reconnect:
    // it must outlive the idle deadline (10 s) on a loaded machine. Tests of the deadline set theirs.
    configuration.requestTimeout = .seconds(120)
    configure(&configuration)
    var logger = Logger(label: "test-server")
    logger.logLevel = .warning
    let app = try buildServerApplication(configuration: configuration, storage: store, logger: logger)
    return try await app.test(.live) { client in
        let port = try #require(client.port)
        return try await body(RunningServer(port: port, store: store, client: client))
    }
}

/// Creates a user straight in the store and returns its token.
func makeUser(_ server: RunningServer, _ name: String = "alice@example.com") async throws -> String {
    try await server.store.createUser(username: name, password: "secret-\(name)").accessToken
}

/// A connection initialised within a deadline the test set short (a few seconds at most).
/// On a loaded machine the init can miss it, and the server then rightly closes the connection,
/// so `open` is tried again, as a client reconnects, up to `attempts` times. Only the attempts
/// are retried: what the test then checks on the connection is not.
func initialisedWithinAShortDeadline<Connection>(
    attempts: Int = 3, _ open: () async throws -> Connection
) async throws -> Connection {
    for _ in 1..<attempts {
        if let connection = try? await open() { return connection }
    }
    return try await open()
}

/// A WebSocket client for tests: sends text, and waits (bounded) for what the server sends.
actor TestSocket {
    enum Outgoing: Sendable {
        case text(String)
        case binary([UInt8])
        case close
    }

    private var received: [String] = []
    private var connected = false
    private var ended = false
    private var endError: (any Error)?
    private(set) var closeFrame: WebSocketCloseFrame?
    private let outgoing: AsyncStream<Outgoing>.Continuation
    private let outgoingStream: AsyncStream<Outgoing>
    private var task: Task<Void, Never>?

    private init() {
        (outgoingStream, outgoing) = AsyncStream<Outgoing>.makeStream()
    }

    /// - Parameter messageLimit: the largest message this client accepts (it closes the
    ///   connection with 1009 past it), as a real client with a limit would.
    static func connect(
        host: String = "127.0.0.1", port: Int, appID: String, tls: TLSConfiguration? = nil, messageLimit: Int = 1 << 26,
        path: String? = nil
    ) async throws -> TestSocket {
        let socket = TestSocket()
        let scheme = tls == nil ? "ws" : "wss"
        let path = path ?? "/sock/1/\(appID)/websocket"
        await socket.start(url: "\(scheme)://\(host):\(port)\(path)", tls: tls, messageLimit: messageLimit)
        try await socket.waitUntilConnected()
        return socket
    }

    private func start(url: String, tls: TLSConfiguration?, messageLimit: Int) {
        let stream = outgoingStream
        task = Task {
            do {
                var logger = Logger(label: "test-ws")
                logger.logLevel = .warning
                let frame = try await WebSocketClient.connect(
                    url: url, configuration: .init(maxFrameSize: min(messageLimit, 1 << 24)), tlsConfiguration: tls, logger: logger
                ) { inbound, outbound, _ in
                    await self.markConnected()
                    try await withThrowingTaskGroup(of: Void.self) { group in
                        group.addTask {
                            for try await message in inbound.messages(maxSize: messageLimit) {
                                if case .text(let text) = message { await self.append(text) }
                            }
                        }
                        group.addTask {
                            for await item in stream {
                                switch item {
                                case .text(let text): try await outbound.write(.text(text))
                                case .binary(let bytes): try await outbound.write(.binary(ByteBuffer(bytes: bytes)))
                                case .close:
                                    try await outbound.close(.normalClosure, reason: nil)
                                    return
                                }
                            }
                        }
                        try await group.next()
                        group.cancelAll()
                    }
                }
                self.finish(closeFrame: frame, error: nil)
            } catch {
                self.finish(closeFrame: nil, error: error)
            }
        }
    }

    private func markConnected() { connected = true }
    /// Whether `receive` hands out one change per message. The server merges the queued
    /// broadcasts of a channel into one `c` array, so a test that pipelines changes and reads
    /// one answer each sets this; a `cv` catch-up reply is then split too.
    var splitsMergedChanges = false

    func splitMergedChanges() { splitsMergedChanges = true }

    private func append(_ text: String) {
        guard splitsMergedChanges, case .channel(let channel, .changes(let list))? = try? ServerMessage.parse(text), list.count > 1 else {
            return received.append(text)
        }
        for change in list { received.append(ServerMessage.channel(channel, .changes([change])).render()) }
    }
    private func finish(closeFrame: WebSocketCloseFrame?, error: (any Error)?) {
        self.closeFrame = closeFrame
        self.endError = error
        ended = true
    }

    private func waitUntilConnected() async throws {
        let deadline = ContinuousClock.now + messageTimeout
        while !connected {
            if ended { throw TestFailure("WebSocket connect failed: \(String(describing: endError))") }
            if ContinuousClock.now > deadline { throw TestFailure("WebSocket connect timed out") }
            try await Task.sleep(for: .milliseconds(5))
        }
    }

    /// Sends a text frame.
    nonisolated func send(_ text: String) {
        outgoing.yield(.text(text))
    }

    nonisolated func sendBinary(_ bytes: [UInt8]) {
        outgoing.yield(.binary(bytes))
    }

    /// The next text message, or a failure after `timeout`.
    func receive(timeout: Duration = messageTimeout) async throws -> String {
        let deadline = ContinuousClock.now + timeout
        while received.isEmpty {
            if ended { throw TestFailure("connection ended while waiting (close: \(String(describing: closeFrame)), error: \(String(describing: endError)))") }
            if ContinuousClock.now > deadline { throw TestFailure("no message within \(timeout)") }
            try await Task.sleep(for: .milliseconds(2))
        }
        return received.removeFirst()
    }

    /// Receives the next message on a channel and parses it as a server message.
    func receiveMessage(timeout: Duration = messageTimeout) async throws -> ServerMessage {
        try ServerMessage.parse(try await receive(timeout: timeout))
    }

    /// Sends `request` on a channel and returns the next message.
    func request(_ text: String) async throws -> String {
        send(text)
        return try await receive()
    }

    /// Asserts nothing arrives for `duration`.
    func expectSilence(for duration: Duration = .milliseconds(200)) async throws -> String? {
        try await Task.sleep(for: duration)
        return received.first
    }

    /// Waits until the server closes the connection; returns its close frame.
    func waitForClose(timeout: Duration = messageTimeout) async throws -> WebSocketCloseFrame? {
        let deadline = ContinuousClock.now + timeout
        while !ended {
            if ContinuousClock.now > deadline { throw TestFailure("connection not closed within \(timeout)") }
            try await Task.sleep(for: .milliseconds(5))
        }
        return closeFrame
    }

    var isEnded: Bool { ended }

    /// Closes the connection and waits for the client task to end.
    func close() async {
        outgoing.yield(.close)
        outgoing.finish()
        let deadline = ContinuousClock.now + .seconds(5)
        while !ended, ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(5))
        }
        task?.cancel()
    }

    /// Authorizes channel `channel` for `bucket` and checks the `auth` reply.
    func authorize(token: String, bucket: String = "notes", channel: Int = 0, clientID: String = "test-client", cmd: String? = nil) async throws -> String {
        let request = InitRequest(clientID: clientID, token: token, appID: "test-app", name: bucket, library: "tests", version: "1", cmd: cmd)
        send("\(channel):init:\(request.renderPayload())")
        let reply = try await receiveMessage()
        guard case .channel(channel, .authOK(let username)) = reply else {
            throw TestFailure("expected auth on channel \(channel), got \(reply)")
        }
        return username
    }
}

struct TestFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// The changes of a `c` message on `channel`.
func changes(_ message: ServerMessage, channel: Int = 0) throws -> [Change] {
    guard case .channel(channel, .changes(let changes)) = message else {
        throw TestFailure("expected c on channel \(channel), got \(message)")
    }
    return changes
}

/// The single applied change of a `c` message.
func appliedChange(_ message: ServerMessage, channel: Int = 0) throws -> AppliedChange {
    let list = try changes(message, channel: channel)
    guard list.count == 1, case .applied(let change) = list[0] else { throw TestFailure("expected one applied change, got \(list)") }
    return change
}

/// The single rejection of a `c` message.
func rejection(_ message: ServerMessage, channel: Int = 0) throws -> ChangeRejection {
    let list = try changes(message, channel: channel)
    guard list.count == 1, case .rejected(let rejection) = list[0] else { throw TestFailure("expected one rejection, got \(list)") }
    return rejection
}

/// A `c` frame creating or modifying `key` with `diff` (a JSON object text).
func changeFrame(channel: Int = 0, key: String, diff: String, sv: Int? = nil, ccid: String, data: String? = nil) -> String {
    var fields = ["\"id\":\(key.jsonQuoted)", "\"o\":\"M\"", "\"v\":\(diff)", "\"ccid\":\(ccid.jsonQuoted)"]
    if let sv { fields.append("\"sv\":\(sv)") }
    if let data { fields.append("\"d\":\(data)") }
    return "\(channel):c:{\(fields.joined(separator: ","))}"
}

/// A fresh ccid.
func newCCID() -> String {
    UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
}

/// Sends a create of `key` with `object` and returns the acknowledgement.
@discardableResult
func create(_ socket: TestSocket, key: String, object: JSONObject, channel: Int = 0) async throws -> AppliedChange {
    let diff = JSONDiffing.encode(JSONDiffing.diff(from: [:], to: object)).compactRendered()
    let reply = try await socket.request(changeFrame(channel: channel, key: key, diff: diff, ccid: newCCID()))
    return try appliedChange(try ServerMessage.parse(reply), channel: channel)
}
