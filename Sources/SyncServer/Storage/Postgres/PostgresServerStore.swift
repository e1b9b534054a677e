import Foundation
import JSONDiff
import Logging
import NIOCore
import PostgresNIO
import SyncProtocol

/// The server's durable state in a PostgreSQL database that several `bucketfs serve` nodes
/// share: the same tables and answers as the SQLite `ServerStore`, with changes of every node
/// delivered in one cv order on each node (`PostgresDelivery`).
///
/// Ordering across nodes: a batch of changes first locks the one `server_state` row (which
/// holds the cv counter) and keeps it until its commit, so batches of all nodes commit one at a
/// time, in cv order, with cvs contiguous within a batch; an entity is read only under that
/// lock, so its next version is always one more than the newest committed one.
public final class PostgresServerStore: Sendable {
    /// Where the database is (without its password).
    public let location: PostgresLocation
    let client: PostgresClient
    let logger: Logger
    let passwordHasher: PasswordHasher
    let hashingQueue = HashingQueue()
    let commitQueue = CommitQueue()
    let delivery: PostgresDelivery
    /// The history this database serves (a restore of it begins another: `ServerHistory`).
    let history: ServerHistory
    private let wakeWriter: AsyncStream<Void>.Continuation
    private let tasks: [Task<Void, Never>]

    /// The NOTIFY channel naming committed changes.
    static let notifyChannel = "bucketfs_changes"
    /// How often a node looks for changes it was not notified of (a dropped LISTEN connection).
    static let pollInterval: Duration = .seconds(1)

    /// The pool's default bound on connections to the database, per node.
    public static let defaultMaximumConnections = 10
    /// The fewest connections a node works with: LISTEN holds one, the change writer and the
    /// delivery sequence each need one besides.
    public static let minimumConnections = 3
    /// How long `open` keeps trying a database that does not answer yet. Not zero: on a busy
    /// machine the pool's first connection can take longer than one lease's wait.
    public static let defaultStartWait: Duration = .seconds(30)

    /// Connects, migrates the schema (under an advisory lock) and starts following changes.
    /// - Parameters:
    ///   - maximumConnections: the pool's bound (one is kept for LISTEN; at least 3 are used).
    ///   - startWait: how long to keep trying while the database does not answer (a node
    ///     started before its database); past it, or at once for other errors, this throws.
    public static func open(
        _ location: PostgresLocation, passwordIterations: Int = 200_000, maximumConnections: Int = defaultMaximumConnections,
        startWait: Duration = defaultStartWait, logger: Logger = Logger(label: "bucketfs.postgres")
    ) async throws -> PostgresServerStore {
        let client = PostgresClient(
            configuration: location.clientConfiguration(maximumConnections: max(minimumConnections, maximumConnections)),
            backgroundLogger: logger)
        let runTask = Task { await client.run() }
        let deadline = ContinuousClock.now + startWait
        while true {
            do {
                try await PostgresSchema.migrate(client, logger: logger)
                let history = try await Self.establishHistory(client, logger: logger)
                let lastCV = try await Self.lastChangeVersion(client, logger: logger)
                return PostgresServerStore(
                    location: location, client: client, runTask: runTask, lastCV: lastCV, history: history,
                    passwordIterations: passwordIterations, logger: logger
                )
            } catch where PostgresAvailability.isUnavailable(error) && ContinuousClock.now < deadline {
                logger.warning("database does not answer; waiting for it", metadata: [
                    "database": "\(location)", "error": "\(PostgresAvailability.reason(error))",
                ])
                try? await Task.sleep(for: .seconds(1))
            } catch {
                runTask.cancel()
                let waited = startWait > .zero && PostgresAvailability.isUnavailable(error) ? " (waited \(startWait))" : ""
                throw SyncServerError.database("\(location)\(waited): \(PostgresAvailability.reason(error))")
            }
        }
    }

    /// Runs the migrations the database lacks and returns their versions (`serve --migrate-only`).
    public static func migrate(_ location: PostgresLocation, logger: Logger = Logger(label: "bucketfs.postgres")) async throws -> [Int] {
        let client = PostgresClient(configuration: location.clientConfiguration(maximumConnections: 2), backgroundLogger: logger)
        let runTask = Task { await client.run() }
        defer { runTask.cancel() }
        do {
            return try await PostgresSchema.migrate(client, logger: logger)
        } catch {
            throw SyncServerError.database("\(location): \(String(reflecting: error))")
        }
    }

    private init(
        location: PostgresLocation, client: PostgresClient, runTask: Task<Void, Never>, lastCV: Int64, history: ServerHistory,
        passwordIterations: Int, logger: Logger
    ) {
        self.location = location
        self.history = history
        self.client = client
        self.logger = logger
        self.passwordHasher = PasswordHasher(iterations: max(1, passwordIterations))
        let delivery = PostgresDelivery(client: client, lastDelivered: lastCV, logger: logger)
        self.delivery = delivery
        let (wakes, wakeWriter) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
        self.wakeWriter = wakeWriter
        let commitQueue = self.commitQueue
        let writer = PostgresChangeWriter(client: client, delivery: delivery, logger: logger)
        tasks = [
            runTask,
            Task { await delivery.run() },
            Task {
                for await _ in wakes {
                    while true {
                        let batch = commitQueue.takeBatch()
                        if batch.isEmpty { break }
                        await writer.commit(batch)
                    }
                }
            },
            Task { await Self.listen(client: client, delivery: delivery, logger: logger) },
            Task {
                while !Task.isCancelled {
                    try? await Task.sleep(for: Self.pollInterval)
                    delivery.poll()
                }
            },
        ]
    }

    /// A `SELECT 1` on a pooled connection (`/readyz`).
    func checkReadable() async throws {
        _ = try await client.one("SELECT 1", as: Int32.self, "checking readiness", logger: logger)
    }

    /// Stops following changes and closes the database connections.
    public func close() {
        wakeWriter.finish()
        delivery.finish()
        for task in tasks { task.cancel() }
    }

    /// LISTENs for other nodes' commits, reconnecting after a dropped connection; every
    /// (re)connection polls, so changes committed while not listening are caught up.
    private static func listen(client: PostgresClient, delivery: PostgresDelivery, logger: Logger) async {
        // Grows while the database stays away, so a long outage is not a busy loop of warnings.
        var delay: Duration = .milliseconds(200)
        while !Task.isCancelled {
            do {
                try await client.withConnection { connection in
                    try await connection.listen(on: notifyChannel) { notifications in
                        delay = .milliseconds(200)
                        delivery.poll()
                        for try await notification in notifications {
                            if let cv = PostgresNotice.committedCV(notification.payload) {
                                delivery.notified(upTo: cv)
                            }
                        }
                    }
                }
            } catch {
                if Task.isCancelled { return }
                PostgresAvailability.noteConnectionFailure(client)
                PostgresAvailability.report(.listenLost, for: client)
                if delay == .milliseconds(200) {
                    logger.warning("LISTEN connection lost; reconnecting", metadata: ["error": "\(PostgresAvailability.reason(error))"])
                }
            }
            try? await Task.sleep(for: delay)
            delay = min(delay * 2, .seconds(2))
        }
    }

    /// The history the database serves, begun anew when it is not where it was last served
    /// (`ServerHistory`). Every node starting on it at once finds the same origin: the first
    /// to lock the state row draws the number, the others take it.
    static func establishHistory(_ client: PostgresClient, logger: Logger) async throws -> ServerHistory {
        try await client.withAvailableConnection("reading the database's history") { connection in
            try await connection.withTransaction(logger: logger) { connection in
                let origin = try await PostgresRows.one(
                    connection.query(PostgresQuery(unsafeSQL: ServerHistory.postgresOriginQuery), logger: logger), as: String.self) ?? ""
                let row = try await PostgresRows.rows(connection.query(
                    "SELECT history, history_origin, last_cv FROM server_state WHERE id = 1 FOR UPDATE", logger: logger)).first
                let (number, recordedOrigin, lastCV): (Int64?, String?, Int64) = try row?.decode((Int64?, String?, Int64).self) ?? (nil, nil, 0)
                let history = ServerHistory.establish(
                    recordedNumber: number, recordedOrigin: recordedOrigin, origin: origin, hasChanges: lastCV > 0)
                if history.start != .continued {
                    try await connection.query(
                        "UPDATE server_state SET history = \(history.storedNumber), history_origin = \(origin) WHERE id = 1", logger: logger)
                }
                return history
            }
        }
    }

    static func lastChangeVersion(_ client: PostgresClient, logger: Logger) async throws -> Int64 {
        try await client.one("SELECT last_cv FROM server_state WHERE id = 1", as: Int64.self, "reading the last cv", logger: logger) ?? 0
    }

    func enqueue(_ item: CommitQueueItem) {
        commitQueue.append(item)
        wakeWriter.yield()
    }
}

/// Collects a query's rows (the connection is free again only once they are all read).
enum PostgresRows {
    static func all<T: PostgresDecodable & Sendable>(_ rows: PostgresRowSequence, as type: T.Type) async throws -> [T] {
        var values: [T] = []
        for try await value in rows.decode(T.self) { values.append(value) }
        return values
    }

    static func one<T: PostgresDecodable & Sendable>(_ rows: PostgresRowSequence, as type: T.Type) async throws -> T? {
        try await all(rows, as: type).first
    }

    static func rows(_ rows: PostgresRowSequence) async throws -> [PostgresRow] {
        var values: [PostgresRow] = []
        for try await row in rows { values.append(row) }
        return values
    }
}

// MARK: - Accounts

extension PostgresServerStore: ServerAccounts {
    public func createUser(username: String, password: String) async throws -> UserCredentials {
        let account = try await NewAccount.make(username: username, password: password, hasher: passwordHasher, queue: hashingQueue)
        let (hashed, token, publicID) = (account.hashed, account.token, account.publicID)
        let now = Date().timeIntervalSince1970
        let tokenHash = Data(TokenGenerator.digest(token))
        let created = try await client.one("""
            WITH new_user AS (
                INSERT INTO users (username, public_id, password_hash, password_salt, password_iterations, created_at)
                VALUES (\(username), \(publicID), \(Data(hashed.hash)), \(Data(hashed.salt)), \(hashed.iterations), \(now))
                ON CONFLICT (username) DO NOTHING
                RETURNING id
            )
            INSERT INTO tokens (token_hash, user_id, created_at) SELECT \(tokenHash), id, \(now) FROM new_user RETURNING user_id
            """, as: Int64.self, "creating a user", logger: logger)
        guard created != nil else { throw SyncServerError.userExists(username) }
        return UserCredentials(username: username, accessToken: token, userID: publicID)
    }

    public func authorize(username: String, password: String) async throws -> UserCredentials {
        let rows = try await client.rows("""
            SELECT id, public_id, password_hash, password_salt, password_iterations FROM users WHERE username = \(username)
            """, "reading a user", logger: logger)
        let found = try rows.first.map { row in
            let (userID, publicID, hash, salt, iterations) = try row.decode((Int64, String, Data, Data, Int).self)
            return StoredPassword(userID: userID, publicID: publicID, hash: Array(hash), salt: Array(salt), iterations: iterations)
        }
        let stored = try await StoredPassword.check(password, against: found, of: username, hasher: passwordHasher, queue: hashingQueue)
        let token = TokenGenerator.generate()
        try await insertToken(token, userID: stored.userID)
        return UserCredentials(username: username, accessToken: token, userID: stored.publicID)
    }

    public func issueToken(username: String) async throws -> UserCredentials {
        let rows = try await client.rows("SELECT id, public_id FROM users WHERE username = \(username)", "reading a user", logger: logger)
        guard let row = rows.first else { throw SyncServerError.unknownUser(username) }
        let (userID, publicID) = try row.decode((Int64, String).self)
        let token = TokenGenerator.generate()
        try await insertToken(token, userID: userID)
        return UserCredentials(username: username, accessToken: token, userID: publicID)
    }

    private func insertToken(_ token: String, userID: Int64) async throws {
        let digest = Data(TokenGenerator.digest(token))
        _ = try await client.rows(
            "INSERT INTO tokens (token_hash, user_id, created_at) VALUES (\(digest), \(userID), \(Date().timeIntervalSince1970))",
            "storing a token", logger: logger)
    }
}

// MARK: - Streaming

extension PostgresServerStore: ServerStorage, GroupCommitting {
    func user(forToken token: String) async throws -> AuthenticatedUser? {
        let digest = Data(TokenGenerator.digest(token))
        let rows = try await client.rows("""
            SELECT users.id, users.username FROM tokens JOIN users ON users.id = tokens.user_id WHERE tokens.token_hash = \(digest)
            """, "checking a token", logger: logger)
        guard let row = rows.first else { return nil }
        let (id, username) = try row.decode((Int64, String).self)
        return AuthenticatedUser(id: id, username: username)
    }

    func user(named username: String) async throws -> AuthenticatedUser? {
        let rows = try await client.rows("SELECT id, username FROM users WHERE username = \(username)", "reading a user", logger: logger)
        guard let row = rows.first else { return nil }
        let (id, name) = try row.decode((Int64, String).self)
        return AuthenticatedUser(id: id, username: name)
    }

    func openBucket(userID: Int64, name: String) async throws -> BucketHandle {
        guard BucketName.isValid(name) else { throw SyncServerError.invalidBucketName(name) }
        // Two connections opening it at once: one insert wins. The other's insert waits for
        // the winner's commit and does nothing, but its statement's snapshot predates that
        // commit, so its SELECT may not see the row either: a second statement does.
        for _ in 0..<2 {
            let id = try await client.one("""
                WITH inserted AS (
                    INSERT INTO buckets (user_id, name, base_cv, ccid_floor)
                    SELECT \(userID), \(name), last_cv, last_cv FROM server_state WHERE id = 1
                    ON CONFLICT (user_id, name) DO NOTHING
                    RETURNING id
                )
                SELECT id FROM inserted UNION ALL SELECT id FROM buckets WHERE user_id = \(userID) AND name = \(name)
                """, as: Int64.self, "opening a bucket", logger: logger)
            if let id { return BucketHandle(id: id, userID: userID, name: name) }
        }
        throw SyncServerError.storage("bucket \(name) vanished while opened")
    }

    func readIndexPage(
        bucket: BucketHandle, afterKey: String?, offset: Int, limit: Int, includeData: Bool, maxDataBytes: Int,
        deliver: @escaping @Sendable (IndexPage) -> Void
    ) async throws {
        try await delivery.read { connection, logger in
            let current = try await Self.currentChangeVersion(connection, bucketID: bucket.id, history: self.history.number, logger: logger)
            let rows = try await PostgresRows.rows(connection.query("""
                SELECT key, version, CASE WHEN \(includeData) THEN data END FROM entities
                WHERE bucket_id = \(bucket.id) AND data IS NOT NULL AND key > \(afterKey ?? "")
                ORDER BY key LIMIT \(limit + 1) OFFSET \(offset)
                """, logger: logger))
            let page = try IndexPageRows.page(
                rows.map { row in
                    let (key, version, data) = try row.decode((String, Int, String?).self)
                    return IndexPageRows.Row(key: key, version: version, data: data)
                },
                current: current, limit: limit, maxDataBytes: maxDataBytes
            )
            return { deliver(page) }
        }
    }

    func readChanges(
        bucket: BucketHandle, since text: String, maxDiffBytes: Int, deliver: @escaping @Sendable (CatchUp) -> Void
    ) async throws {
        try await delivery.read { connection, logger in
            let catchUp = try await Self.catchUp(
                connection, bucket: bucket, since: text, history: self.history.number, maxDiffBytes: maxDiffBytes, logger: logger)
            return { deliver(catchUp) }
        }
    }

    func entityVersion(bucket: BucketHandle, key: String, version: Int) async throws -> KeptVersion? {
        let rows = try await client.rows("""
            SELECT v.data, v.accepted_at, (
                SELECT c.ccid FROM changes c WHERE c.bucket_id = v.bucket_id AND c.key = v.key AND c.end_version = v.version
                ORDER BY c.cv DESC LIMIT 1
            ) AS ccid
            FROM entity_versions v WHERE v.bucket_id = \(bucket.id) AND v.key = \(key) AND v.version = \(version)
            """, "reading an entity version", logger: logger)
        guard let row = rows.first else { return nil }
        let (text, acceptedAt, ccid) = try row.decode((String, Double?, String?).self)
        return KeptVersion(
            data: try ServerStore.decodeObject(text, what: "entity \(key).\(version)"), acceptedAt: acceptedAt, ccid: ccid)
    }

    func entity(bucket: BucketHandle, key: String) async throws -> EntityState? {
        let rows = try await PostgresRows.rows(client.query(
            "SELECT version, data FROM entities WHERE bucket_id = \(bucket.id) AND key = \(key)"))
        guard let row = rows.first else { return nil }
        let (version, text) = try row.decode((Int, String?).self)
        return EntityState(version: version, data: try text.map { try ServerStore.decodeObject($0, what: "entity \(key)") })
    }

    func deliverForeignChanges(to publish: @escaping @Sendable (_ bucketID: Int64, _ change: StoredChange) -> Void) {
        delivery.setForeignHandler(publish)
    }

    func observeDatabase(_ observer: @escaping @Sendable (DatabaseEvent) -> Void) {
        PostgresAvailability.setObserver(observer, for: client)
    }

    // MARK: Queries

    /// The bucket's current cv in `history`: its newest change's, or its base's when the log is empty.
    static func currentChangeVersion(_ connection: PostgresConnection, bucketID: Int64, history: UInt64, logger: Logger) async throws -> String {
        let newest = try await PostgresRows.rows(connection.query("""
            SELECT cv, key, ccid, end_version FROM changes WHERE bucket_id = \(bucketID) ORDER BY cv DESC LIMIT 1
            """, logger: logger))
        if let row = newest.first {
            let (cv, key, ccid, endVersion) = try row.decode((Int64, String, String, Int).self)
            return ChangeSequence.render(cv, key: key, ccid: ccid, endVersion: endVersion, history: history)
        }
        let base = try await PostgresRows.rows(
            connection.query("SELECT base_cv, base_tag FROM buckets WHERE id = \(bucketID)", logger: logger)).first
        let (baseCV, storedTag): (Int64, Int64?) = try base?.decode((Int64, Int64?).self) ?? (0, nil)
        return ChangeSequence.renderBase(baseCV, storedTag: storedTag, bucketID: bucketID, history: history)
    }

    static func catchUp(
        _ connection: PostgresConnection, bucket: BucketHandle, since text: String, history: UInt64, maxDiffBytes: Int, logger: Logger
    ) async throws -> CatchUp {
        guard let (since, tag) = ChangeSequence.parse(text, history: history),
              let baseRow = try await PostgresRows.rows(
                  connection.query("SELECT base_cv, base_tag FROM buckets WHERE id = \(bucket.id)", logger: logger)).first
        else { return .unknown }
        let (base, storedTag) = try baseRow.decode((Int64, Int64?).self)
        // Known cvs are the base and every retained change of this bucket, each with its tag
        // (as in `ServerStore`: a cv from before a restore names another change, or none).
        if since != base || tag != ChangeSequence.baseTag(base, storedTag: storedTag, bucketID: bucket.id) {
            let named = try await PostgresRows.rows(connection.query(
                "SELECT key, ccid, end_version FROM changes WHERE bucket_id = \(bucket.id) AND cv = \(since)", logger: logger))
            guard let row = named.first else { return .unknown }
            let (key, ccid, endVersion) = try row.decode((String, String, Int).self)
            guard ChangeSequence.tag(key: key, ccid: ccid, endVersion: endVersion) == tag else { return .unknown }
        }
        if maxDiffBytes < .max {
            let diffBytes = try await PostgresRows.one(connection.query(
                "SELECT COALESCE(SUM(octet_length(diff)), 0)::BIGINT FROM changes WHERE bucket_id = \(bucket.id) AND cv > \(since)",
                logger: logger), as: Int64.self) ?? 0
            guard diffBytes <= maxDiffBytes else { return .unknown }
        }
        let rows = try await PostgresRows.rows(connection.query("""
            SELECT \(unescaped: changeColumns) FROM changes WHERE bucket_id = \(bucket.id) AND cv > \(since) ORDER BY cv
            """, logger: logger))
        return .changes(try rows.map { try storedChange(from: $0).change })
    }

    /// The columns `storedChange(from:)` reads, in its order.
    static let changeColumns = "cv, bucket_id, key, client_id, ccid, operation, diff, source_version, end_version"

    static func storedChange(from row: PostgresRow) throws -> (bucketID: Int64, change: StoredChange) {
        let (cv, bucketID, key, clientID, ccid, operation, diff, sourceVersion, endVersion) =
            try row.decode((Int64, Int64, String, String, String, String, String?, Int?, Int).self)
        return (bucketID, try StoredChange(
            cv: cv, key: key, clientID: clientID, ccid: ccid, operationText: operation, diffText: diff,
            sourceVersion: sourceVersion, endVersion: endVersion
        ))
    }
}
