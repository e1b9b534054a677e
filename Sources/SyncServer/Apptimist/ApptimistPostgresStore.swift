import ApptimistCrypto
import ApptimistProtocol
import Foundation
import Logging
import PostgresNIO

/// The Apptimist tables in the servers' PostgreSQL database (migration 3), shared by every node.
struct ApptimistPostgresStore: ApptimistStorage {
    let client: PostgresClient
    let logger: Logger

    init(_ store: PostgresServerStore) {
        client = store.client
        logger = store.logger
    }

    var pollInterval: Duration? { PostgresServerStore.pollInterval }

    /// Queued messages take their seq under this lock, so seqs commit in order and a
    /// connection delivering after a cursor never passes one committed later.
    static let queueLockKey: Int64 = 0x6170_7074_696D_6973 // "apptimis"

    static let schema = [
        """
        CREATE TABLE apptimist_service (
            id INTEGER PRIMARY KEY CHECK (id = 1),
            box_secret BYTEA NOT NULL,
            sign_seed BYTEA NOT NULL
        )
        """,
        """
        CREATE TABLE apptimist_accounts (
            public_key BYTEA PRIMARY KEY,
            auth_key BYTEA NOT NULL,
            name BYTEA NOT NULL,
            uid BYTEA NOT NULL,
            author BYTEA,
            created_at DOUBLE PRECISION NOT NULL
        )
        """,
        "CREATE INDEX apptimist_accounts_by_name ON apptimist_accounts(name)",
        "CREATE INDEX apptimist_accounts_by_uid ON apptimist_accounts(uid)",
        "CREATE TABLE apptimist_invitations (token_hash BYTEA PRIMARY KEY, created_at DOUBLE PRECISION NOT NULL)",
        """
        CREATE TABLE apptimist_files (
            owner BYTEA NOT NULL REFERENCES apptimist_accounts(public_key) ON DELETE CASCADE,
            name BYTEA NOT NULL,
            contents BYTEA NOT NULL,
            PRIMARY KEY (owner, name)
        )
        """,
        """
        CREATE TABLE apptimist_messages (
            seq BIGSERIAL PRIMARY KEY,
            owner BYTEA NOT NULL REFERENCES apptimist_accounts(public_key) ON DELETE CASCADE,
            message_id BYTEA NOT NULL,
            version INTEGER NOT NULL,
            header BYTEA NOT NULL,
            data_nonce BYTEA,
            data BYTEA NOT NULL,
            UNIQUE (owner, message_id)
        )
        """,
        "CREATE INDEX apptimist_messages_by_owner ON apptimist_messages(owner, seq)",
        """
        CREATE TABLE apptimist_vouches (
            subject BYTEA NOT NULL,
            voucher BYTEA NOT NULL,
            signature BYTEA NOT NULL,
            PRIMARY KEY (subject, voucher)
        )
        """,
    ]

    /// The file locks every node takes (migration 4): one row per locked file, its holder a
    /// node's connection (`ApptimistLockHolder.bytes`), expiring by the database's clock (so a
    /// crashed node's locks end too, and nodes' clocks need not agree).
    static let lockSchema = [
        """
        CREATE TABLE apptimist_locks (
            owner BYTEA NOT NULL,
            name BYTEA NOT NULL,
            holder BYTEA NOT NULL,
            expires_at TIMESTAMPTZ NOT NULL,
            PRIMARY KEY (owner, name)
        )
        """,
        "CREATE INDEX apptimist_locks_by_holder ON apptimist_locks(holder)",
    ]

    /// Migration 5, as SQLite's "v5 apptimist notices": a queued file notice names its file, so
    /// that a new notice of a file takes the place of the last (one per owner and file).
    static let noticesSchema = [
        "ALTER TABLE apptimist_messages ADD COLUMN notice_file BYTEA",
        "CREATE UNIQUE INDEX apptimist_notices ON apptimist_messages(owner, notice_file) WHERE notice_file IS NOT NULL",
    ]

    /// Migration 7, as SQLite's "v7 apptimist across versions".
    static let acrossVersionsSchema = [
        "ALTER TABLE apptimist_messages ADD COLUMN cross_id BYTEA",
        "CREATE INDEX apptimist_messages_by_cross_id ON apptimist_messages(owner, cross_id) WHERE cross_id IS NOT NULL",
        "ALTER TABLE apptimist_accounts ADD COLUMN login_versions INTEGER NOT NULL DEFAULT 0",
    ]

    /// Migration 8, as SQLite's "v8 apptimist header lines".
    static let headerLinesSchema = [
        "ALTER TABLE apptimist_messages ADD COLUMN literal_id BYTEA",
        "CREATE INDEX apptimist_messages_by_literal_id ON apptimist_messages(owner, literal_id) WHERE literal_id IS NOT NULL",
        "ALTER TABLE apptimist_accounts ADD COLUMN speaks_header_lines BOOLEAN NOT NULL DEFAULT FALSE",
    ]

    func serviceIdentity() async throws -> ApptimistIdentity {
        let fresh = try ApptimistIdentity.generate(name: "service")
        _ = try await client.rows("""
            INSERT INTO apptimist_service (id, box_secret, sign_seed) VALUES (1, \(Data(fresh.box.secretKey)), \(Data(fresh.signing.seed)))
            ON CONFLICT (id) DO NOTHING
            """, "storing the Apptimist service keys", logger: logger)
        let rows = try await client.rows("SELECT box_secret, sign_seed FROM apptimist_service WHERE id = 1", "reading the Apptimist service keys", logger: logger)
        guard let row = rows.first else { throw ApptimistStoreError.corrupt("no service keys") }
        let (boxSecret, seed) = try row.decode((Data, Data).self)
        do {
            return ApptimistIdentity(name: "service", box: try BoxKeyPair(secretKey: Array(boxSecret)), signing: try SigningKeyPair(seed: Array(seed)))
        } catch {
            throw ApptimistStoreError.corrupt("the service's key pairs: \(error)")
        }
    }

    func createInvitation() async throws -> String {
        let token = ApptimistHex.encode((0 ..< 16).map { _ in UInt8.random(in: 0 ... 255) })
        _ = try await client.rows("""
            INSERT INTO apptimist_invitations (token_hash, created_at) VALUES (\(ApptimistSQLiteStore.tokenHash(token)), \(Date().timeIntervalSince1970))
            """, "storing an invitation", logger: logger)
        return token
    }

    func createAccount(_ account: ApptimistAccount, invitation: String?) async throws {
        let logger = self.logger
        try await Self.unwrappingRefusals {
            try await client.withAvailableConnection("creating an Apptimist account") { connection in
                try await connection.withTransaction(logger: logger) { connection in
                    if let invitation {
                        let used = try await PostgresRows.rows(connection.query(
                            "DELETE FROM apptimist_invitations WHERE token_hash = \(ApptimistSQLiteStore.tokenHash(invitation)) RETURNING 1", logger: logger))
                        guard !used.isEmpty else { throw ApptimistStoreError.invitationRefused }
                    }
                    let created = try await PostgresRows.rows(connection.query("""
                        INSERT INTO apptimist_accounts (public_key, auth_key, name, uid, author, created_at)
                        VALUES (\(Data(account.publicKey)), \(Data(account.authKey)), \(Data(account.name)), \(Data(account.uid)),
                                \(account.author.map { Data($0) }), \(Date().timeIntervalSince1970))
                        ON CONFLICT (public_key) DO NOTHING RETURNING 1
                        """, logger: logger))
                    // Thrown inside the transaction: a used invitation comes back.
                    guard !created.isEmpty else { throw ApptimistStoreError.accountExists }
                }
            }
        }
    }

    /// A refusal thrown inside a transaction comes out wrapped (with its rollback's outcome):
    /// the caller wants the refusal.
    private static func unwrappingRefusals(_ body: () async throws -> Void) async throws {
        do {
            try await body()
        } catch let error as PostgresTransactionError {
            if let refusal = error.closureError as? ApptimistStoreError, error.rollbackError == nil { throw refusal }
            throw error
        }
    }

    private static func account(_ row: PostgresRow) throws -> ApptimistAccount {
        let (publicKey, authKey, name, uid, author, loginVersions, headerLines) = try row.decode((Data, Data, Data, Data, Data?, Int, Bool).self)
        return ApptimistAccount(
            publicKey: Array(publicKey), authKey: Array(authKey), name: Array(name), uid: Array(uid), author: author.map { Array($0) },
            loginVersions: ApptimistVersion.set(bits: loginVersions), headerLayout: headerLines ? .headerLines : .fieldLists)
    }

    func account(publicKey: [UInt8]) async throws -> ApptimistAccount? {
        try await client.rows("""
            SELECT public_key, auth_key, name, uid, author, login_versions, speaks_header_lines FROM apptimist_accounts WHERE public_key = \(Data(publicKey))
            """, "reading an Apptimist account", logger: logger).first.map(Self.account)
    }

    func accounts(matching search: ApptimistSearch, limit: Int?) async throws -> [ApptimistAccount] {
        let rows: [PostgresRow]
        switch search {
        case .namePrefix(let name):
            rows = try await client.rows("""
                SELECT public_key, auth_key, name, uid, author, login_versions, speaks_header_lines FROM apptimist_accounts
                WHERE substr(name, 1, octet_length(\(Data(name)))) = \(Data(name)) ORDER BY name, public_key LIMIT \(limit)
                """, "searching Apptimist accounts", logger: logger)
        case .uid(let uid):
            rows = try await client.rows("""
                SELECT public_key, auth_key, name, uid, author, login_versions, speaks_header_lines FROM apptimist_accounts
                WHERE uid = \(Data(uid)) ORDER BY name, public_key LIMIT \(limit)
                """, "searching Apptimist accounts", logger: logger)
        case .publicKey(let key):
            rows = try await client.rows("""
                SELECT public_key, auth_key, name, uid, author, login_versions, speaks_header_lines FROM apptimist_accounts WHERE public_key = \(Data(key)) LIMIT \(limit)
                """, "searching Apptimist accounts", logger: logger)
        }
        return try rows.map(Self.account)
    }

    func deleteAccount(publicKey: [UInt8]) async throws {
        let logger = self.logger
        try await client.withAvailableConnection("deleting an Apptimist account") { connection in
            try await connection.withTransaction(logger: logger) { connection in
                try await connection.query("DELETE FROM apptimist_accounts WHERE public_key = \(Data(publicKey))", logger: logger)
                try await connection.query(
                    "DELETE FROM apptimist_vouches WHERE subject = \(Data(publicKey)) OR voucher = \(Data(publicKey))", logger: logger)
            }
        }
    }

    func file(owner: [UInt8], name: [UInt8]) async throws -> [UInt8]? {
        try await client.one("""
            SELECT contents FROM apptimist_files WHERE owner = \(Data(owner)) AND name = \(Data(name))
            """, as: Data.self, "reading an Apptimist file", logger: logger).map { Array($0) }
    }

    func writeFile(owner: [UInt8], name: [UInt8], contents: [UInt8], notice: ApptimistQueuedMessage?) async throws {
        guard let notice else {
            _ = try await client.rows("""
                INSERT INTO apptimist_files (owner, name, contents) VALUES (\(Data(owner)), \(Data(name)), \(Data(contents)))
                ON CONFLICT (owner, name) DO UPDATE SET contents = excluded.contents
                """, "writing an Apptimist file", logger: logger)
            return
        }
        let logger = self.logger
        try await inQueueTransaction("writing an Apptimist file") { connection in
            try await connection.query("""
                INSERT INTO apptimist_files (owner, name, contents) VALUES (\(Data(owner)), \(Data(name)), \(Data(contents)))
                ON CONFLICT (owner, name) DO UPDATE SET contents = excluded.contents
                """, logger: logger)
            try await Self.queueNotice(notice, owner: owner, file: name, connection, logger: logger)
            return true
        }
    }

    func removeFile(owner: [UInt8], name: [UInt8], notice: ApptimistQueuedMessage?) async throws -> Bool {
        let logger = self.logger
        return try await inQueueTransaction("removing an Apptimist file") { connection in
            let removed = try await PostgresRows.rows(connection.query("""
                DELETE FROM apptimist_files WHERE owner = \(Data(owner)) AND name = \(Data(name)) RETURNING 1
                """, logger: logger))
            guard !removed.isEmpty else { return false }
            if let notice { try await Self.queueNotice(notice, owner: owner, file: name, connection, logger: logger) }
            return true
        }
    }

    func queueMissingNotices(owner: [UInt8], notice: @escaping @Sendable ([UInt8], [UInt8]) throws -> ApptimistQueuedMessage) async throws {
        let logger = self.logger
        // Under the queue lock, which every change that queues a notice takes: read and insert are one step.
        try await inQueueTransaction("queueing missing Apptimist notices") { connection in
            let files = try await PostgresRows.rows(connection.query("""
                SELECT name, contents FROM apptimist_files f WHERE owner = \(Data(owner))
                AND NOT EXISTS (SELECT 1 FROM apptimist_messages m WHERE m.owner = \(Data(owner)) AND m.notice_file = f.name)
                """, logger: logger))
            for file in files {
                let (name, contents) = try file.decode((Data, Data).self)
                try await Self.insert(try notice(Array(name), Array(contents)), owner: owner, noticeFile: Array(name), connection, logger: logger)
            }
            return true
        }
    }

    /// A transaction that may queue messages: it takes their seq under the queue lock first.
    @discardableResult
    private func inQueueTransaction(_ what: String, _ body: @escaping @Sendable (PostgresConnection) async throws -> Bool) async throws -> Bool {
        let logger = self.logger
        return try await client.withAvailableConnection(what) { connection in
            try await connection.withTransaction(logger: logger) { connection in
                try await connection.query("SELECT pg_advisory_xact_lock(\(Self.queueLockKey))", logger: logger)
                return try await body(connection)
            }
        }
    }

    /// A file notice in place of the owner's earlier notice of the same file (at most one each).
    private static func queueNotice(
        _ notice: ApptimistQueuedMessage, owner: [UInt8], file: [UInt8], _ connection: PostgresConnection, logger: Logger
    ) async throws {
        try await connection.query(
            "DELETE FROM apptimist_messages WHERE owner = \(Data(owner)) AND notice_file = \(Data(file))", logger: logger)
        try await insert(notice, owner: owner, noticeFile: file, connection, logger: logger)
    }

    /// One queue entry (nothing when the owner has no account, or already has that id).
    private static func insert(
        _ message: ApptimistQueuedMessage, owner: [UInt8], noticeFile: [UInt8]?, _ connection: PostgresConnection, logger: Logger
    ) async throws {
        let header = Data(try ApptimistHeader(version: message.version, pdu: message.pdu).render())
        try await connection.query("""
            INSERT INTO apptimist_messages (owner, message_id, version, header, data_nonce, data, notice_file, cross_id, literal_id)
            SELECT \(Data(owner)), \(Data(message.id)), \(Int(message.version.rawValue)), \(header),
                   \(message.data.nonce.map { Data($0) }), \(Data(message.data.sealed)), \(noticeFile.map { Data($0) }),
                   \(message.crossID.map { Data($0) }), \(message.literalID.map { Data($0) })
            WHERE EXISTS (SELECT 1 FROM apptimist_accounts WHERE public_key = \(Data(owner)))
            ON CONFLICT (owner, message_id) DO NOTHING
            """, logger: logger)
    }

    func queueMessages(_ copies: [(owner: [UInt8], message: ApptimistQueuedMessage)]) async throws {
        let logger = self.logger
        try await inQueueTransaction("queueing an Apptimist message") { connection in
            for (owner, message) in copies { try await Self.insert(message, owner: owner, noticeFile: nil, connection, logger: logger) }
            return true
        }
    }

    func messages(owner: [UInt8], after seq: Int64, limit: Int) async throws -> [ApptimistQueuedMessage] {
        let rows = try await client.rows("""
            SELECT seq, message_id, cross_id, literal_id, version, header, data_nonce, data FROM apptimist_messages
            WHERE owner = \(Data(owner)) AND seq > \(seq) ORDER BY seq LIMIT \(limit)
            """, "reading Apptimist messages", logger: logger)
        return try rows.map(Self.message)
    }

    /// A row of `seq, message_id, cross_id, literal_id, version, header, data_nonce, data`.
    private static func message(_ row: PostgresRow) throws -> ApptimistQueuedMessage {
        let (seq, id, crossID, literalID, versionNumber, header, nonce, data) = try row.decode((Int64, Data, Data?, Data?, Int, Data, Data?, Data).self)
        return try ApptimistQueuedMessage(
            stored: seq, id: Array(id), crossID: crossID.map { Array($0) }, literalID: literalID.map { Array($0) }, version: versionNumber,
            header: Array(header), nonce: nonce.map { Array($0) }, data: Array(data))
    }

    func replayStart(owner: [UInt8], head: [UInt8], max: UInt16) async throws -> Int64 {
        let window = try await client.rows("""
            SELECT seq, message_id, cross_id, literal_id FROM apptimist_messages WHERE owner = \(Data(owner))
            ORDER BY seq DESC LIMIT \(max == 0 ? nil : Int(max))
            """, "reading an Apptimist queue", logger: logger).map { row in
                let (seq, id, crossID, literalID) = try row.decode((Int64, Data, Data?, Data?).self)
                return ApptimistQueuedMessage.Names(seq: seq, id: Array(id), crossID: crossID.map { Array($0) }, literalID: literalID.map { Array($0) })
            }
        return ApptimistQueuedMessage.replayStart(window: window, head: head, max: max)
    }

    func truncate(owner: [UInt8], id: [UInt8]) async throws -> ApptimistQueuedMessage? {
        try await client.rows("""
            DELETE FROM apptimist_messages
            WHERE owner = \(Data(owner)) AND (message_id = \(Data(id)) OR cross_id = \(Data(id)) OR literal_id = \(Data(id)))
            RETURNING seq, message_id, cross_id, literal_id, version, header, data_nonce, data
            """, "truncating an Apptimist message", logger: logger).first.map(Self.message)
    }

    func recordLogin(publicKey: [UInt8], version: ApptimistVersion) async throws {
        _ = try await client.rows("""
            UPDATE apptimist_accounts SET login_versions = login_versions | \(version.bit) WHERE public_key = \(Data(publicKey))
            """, "recording an Apptimist login", logger: logger)
    }

    func recordHeaderLayout(publicKey: [UInt8], layout: ApptimistHeaderLayout) async throws {
        _ = try await client.rows("""
            UPDATE apptimist_accounts SET speaks_header_lines = \(layout == .headerLines) WHERE public_key = \(Data(publicKey))
            """, "recording an Apptimist header layout", logger: logger)
    }

    func setVouch(subject: [UInt8], voucher: [UInt8], signature: [UInt8]?) async throws {
        if let signature {
            _ = try await client.rows("""
                INSERT INTO apptimist_vouches (subject, voucher, signature) VALUES (\(Data(subject)), \(Data(voucher)), \(Data(signature)))
                ON CONFLICT (subject, voucher) DO UPDATE SET signature = excluded.signature
                """, "storing a vouch", logger: logger)
        } else {
            _ = try await client.rows("""
                DELETE FROM apptimist_vouches WHERE subject = \(Data(subject)) AND voucher = \(Data(voucher))
                """, "revoking a vouch", logger: logger)
        }
    }

    func vouchers(subject: [UInt8]) async throws -> [[UInt8]] {
        try await client.rows("""
            SELECT voucher FROM apptimist_vouches WHERE subject = \(Data(subject)) ORDER BY voucher
            """, "reading vouchers", logger: logger).map { Array(try $0.decode(Data.self)) }
    }

    func takeLock(owner: [UInt8], name: [UInt8], holder: ApptimistLockHolder, lifetime: Duration) async throws -> Bool {
        // One statement: a new lock, a renewal by its holder, or the takeover of an expired one;
        // no row back when another holder's lock stands.
        try await !client.rows("""
            INSERT INTO apptimist_locks (owner, name, holder, expires_at)
            VALUES (\(Data(owner)), \(Data(name)), \(Data(holder.bytes)), now() + make_interval(secs => \(lifetime / .seconds(1))))
            ON CONFLICT (owner, name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
            WHERE apptimist_locks.holder = excluded.holder OR apptimist_locks.expires_at <= now()
            RETURNING 1
            """, "taking an Apptimist file lock", logger: logger).isEmpty
    }

    func isLocked(owner: [UInt8], name: [UInt8], byOtherThan holder: ApptimistLockHolder) async throws -> Bool {
        try await !client.rows("""
            SELECT 1 FROM apptimist_locks
            WHERE owner = \(Data(owner)) AND name = \(Data(name)) AND holder <> \(Data(holder.bytes)) AND expires_at > now()
            """, "reading an Apptimist file lock", logger: logger).isEmpty
    }

    func releaseLock(owner: [UInt8], name: [UInt8], holder: ApptimistLockHolder) async throws {
        _ = try await client.rows("""
            DELETE FROM apptimist_locks WHERE owner = \(Data(owner)) AND name = \(Data(name)) AND holder = \(Data(holder.bytes))
            """, "releasing an Apptimist file lock", logger: logger)
    }

    func releaseLocks(holder: ApptimistLockHolder) async throws {
        _ = try await client.rows("""
            DELETE FROM apptimist_locks WHERE holder = \(Data(holder.bytes))
            """, "releasing an Apptimist connection's file locks", logger: logger)
    }
}
