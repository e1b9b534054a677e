import ApptimistCrypto
import ApptimistProtocol
import Crypto
import Foundation
import GRDB

/// The Apptimist tables in the server's SQLite file (migration "v4 apptimist").
struct ApptimistSQLiteStore: ApptimistStorage {
    let pool: DatabasePool
    /// The store's file locks, in memory (`ApptimistFileLocks`).
    let locks: ApptimistFileLocks

    init(_ store: ServerStore) {
        pool = store.pool
        locks = store.apptimistLocks
    }

    /// One node owns the file.
    var pollInterval: Duration? { nil }

    static let schema = """
        CREATE TABLE apptimist_service (
            id INTEGER PRIMARY KEY CHECK (id = 1),
            box_secret BLOB NOT NULL,
            sign_seed BLOB NOT NULL
        );
        CREATE TABLE apptimist_accounts (
            public_key BLOB PRIMARY KEY,
            auth_key BLOB NOT NULL,
            name BLOB NOT NULL,
            uid BLOB NOT NULL,
            author BLOB,
            created_at REAL NOT NULL
        ) WITHOUT ROWID;
        CREATE INDEX apptimist_accounts_by_name ON apptimist_accounts(name);
        CREATE INDEX apptimist_accounts_by_uid ON apptimist_accounts(uid);
        -- Only a hash of each invitation token is kept (as for access tokens).
        CREATE TABLE apptimist_invitations (
            token_hash BLOB PRIMARY KEY,
            created_at REAL NOT NULL
        ) WITHOUT ROWID;
        CREATE TABLE apptimist_files (
            owner BLOB NOT NULL REFERENCES apptimist_accounts(public_key) ON DELETE CASCADE,
            name BLOB NOT NULL,
            contents BLOB NOT NULL,
            PRIMARY KEY (owner, name)
        ) WITHOUT ROWID;
        CREATE TABLE apptimist_messages (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            owner BLOB NOT NULL REFERENCES apptimist_accounts(public_key) ON DELETE CASCADE,
            message_id BLOB NOT NULL,
            version INTEGER NOT NULL,
            header BLOB NOT NULL,
            data_nonce BLOB,
            data BLOB NOT NULL,
            UNIQUE (owner, message_id)
        );
        CREATE INDEX apptimist_messages_by_owner ON apptimist_messages(owner, seq);
        CREATE TABLE apptimist_vouches (
            subject BLOB NOT NULL,
            voucher BLOB NOT NULL,
            signature BLOB NOT NULL,
            PRIMARY KEY (subject, voucher)
        ) WITHOUT ROWID;
        """

    /// Migration "v5 apptimist notices": a queued file notice names its file, so that a new
    /// notice of a file takes the place of the last (one per owner and file).
    static let noticesSchema = """
        ALTER TABLE apptimist_messages ADD COLUMN notice_file BLOB;
        CREATE UNIQUE INDEX apptimist_notices ON apptimist_messages(owner, notice_file) WHERE notice_file IS NOT NULL;
        """

    /// Migration "v7 apptimist across versions": the id a message has on connections of the
    /// other version (`ApptimistQueuedMessage.rendition`), and the versions each account has
    /// logged in with (a bit per version).
    static let acrossVersionsSchema = """
        ALTER TABLE apptimist_messages ADD COLUMN cross_id BLOB;
        CREATE INDEX apptimist_messages_by_cross_id ON apptimist_messages(owner, cross_id) WHERE cross_id IS NOT NULL;
        ALTER TABLE apptimist_accounts ADD COLUMN login_versions INTEGER NOT NULL DEFAULT 0;
        """

    /// Migration "v8 apptimist header lines": the id a message has on version 1 connections that
    /// speak the seed's header lines (`ApptimistHeaderLayout`), and whether an account's version
    /// 1 devices last spoke them (so LOGIN's replay comes in them).
    static let headerLinesSchema = """
        ALTER TABLE apptimist_messages ADD COLUMN literal_id BLOB;
        CREATE INDEX apptimist_messages_by_literal_id ON apptimist_messages(owner, literal_id) WHERE literal_id IS NOT NULL;
        ALTER TABLE apptimist_accounts ADD COLUMN speaks_header_lines INTEGER NOT NULL DEFAULT 0;
        """

    func serviceIdentity() async throws -> ApptimistIdentity {
        let fresh = try ApptimistIdentity.generate(name: "service")
        let (boxSecret, seed) = try await pool.write { db -> (Data, Data) in
            if let row = try Row.fetchOne(db, sql: "SELECT box_secret, sign_seed FROM apptimist_service WHERE id = 1") {
                return (row["box_secret"], row["sign_seed"])
            }
            try db.execute(
                sql: "INSERT INTO apptimist_service (id, box_secret, sign_seed) VALUES (1, ?, ?)",
                arguments: [Data(fresh.box.secretKey), Data(fresh.signing.seed)])
            return (Data(fresh.box.secretKey), Data(fresh.signing.seed))
        }
        do {
            return ApptimistIdentity(name: "service", box: try BoxKeyPair(secretKey: Array(boxSecret)), signing: try SigningKeyPair(seed: Array(seed)))
        } catch {
            throw ApptimistStoreError.corrupt("the service's key pairs: \(error)")
        }
    }

    static func tokenHash(_ token: String) -> Data { Data(SHA256.hash(data: Array(token.utf8))) }

    func createInvitation() async throws -> String {
        let token = ApptimistHex.encode((0 ..< 16).map { _ in UInt8.random(in: 0 ... 255) })
        try await pool.write { db in
            try db.execute(
                sql: "INSERT INTO apptimist_invitations (token_hash, created_at) VALUES (?, ?)",
                arguments: [Self.tokenHash(token), Date().timeIntervalSince1970])
        }
        return token
    }

    func createAccount(_ account: ApptimistAccount, invitation: String?) async throws {
        try await pool.write { db in
            if let invitation {
                try db.execute(sql: "DELETE FROM apptimist_invitations WHERE token_hash = ?", arguments: [Self.tokenHash(invitation)])
                guard db.changesCount == 1 else { throw ApptimistStoreError.invitationRefused }
            }
            if try Bool.fetchOne(db, sql: "SELECT 1 FROM apptimist_accounts WHERE public_key = ?", arguments: [Data(account.publicKey)]) != nil {
                throw ApptimistStoreError.accountExists
            }
            try db.execute(
                sql: "INSERT INTO apptimist_accounts (public_key, auth_key, name, uid, author, created_at) VALUES (?, ?, ?, ?, ?, ?)",
                arguments: [
                    Data(account.publicKey), Data(account.authKey), Data(account.name), Data(account.uid),
                    account.author.map { Data($0) }, Date().timeIntervalSince1970,
                ])
        }
    }

    private static func account(_ row: Row) -> ApptimistAccount {
        ApptimistAccount(
            publicKey: Array(row["public_key"] as Data), authKey: Array(row["auth_key"] as Data),
            name: Array(row["name"] as Data), uid: Array(row["uid"] as Data), author: (row["author"] as Data?).map { Array($0) },
            loginVersions: ApptimistVersion.set(bits: row["login_versions"]),
            headerLayout: row["speaks_header_lines"] as Bool ? .headerLines : .fieldLists)
    }

    func account(publicKey: [UInt8]) async throws -> ApptimistAccount? {
        try await pool.read { db in
            try Row.fetchOne(db, sql: "SELECT * FROM apptimist_accounts WHERE public_key = ?", arguments: [Data(publicKey)]).map(Self.account)
        }
    }

    func accounts(matching search: ApptimistSearch, limit: Int?) async throws -> [ApptimistAccount] {
        let (condition, value): (String, [UInt8]) = switch search {
        case .namePrefix(let name): ("substr(name, 1, length(?1)) = ?1", name)
        case .uid(let uid): ("uid = ?1", uid)
        case .publicKey(let key): ("public_key = ?1", key)
        }
        return try await pool.read { db in
            try Row.fetchAll(
                db, sql: "SELECT * FROM apptimist_accounts WHERE \(condition) ORDER BY name, public_key LIMIT ?2",
                arguments: [Data(value), limit ?? -1]
            ).map(Self.account)
        }
    }

    func deleteAccount(publicKey: [UInt8]) async throws {
        try await pool.write { db in
            try db.execute(sql: "DELETE FROM apptimist_accounts WHERE public_key = ?", arguments: [Data(publicKey)])
            try db.execute(sql: "DELETE FROM apptimist_vouches WHERE subject = ?1 OR voucher = ?1", arguments: [Data(publicKey)])
        }
    }

    func file(owner: [UInt8], name: [UInt8]) async throws -> [UInt8]? {
        try await pool.read { db in
            try Data.fetchOne(db, sql: "SELECT contents FROM apptimist_files WHERE owner = ? AND name = ?", arguments: [Data(owner), Data(name)])
                .map { Array($0) }
        }
    }

    func writeFile(owner: [UInt8], name: [UInt8], contents: [UInt8], notice: ApptimistQueuedMessage?) async throws {
        let noticeHeader = try notice.map { try Self.header(of: $0) }
        try await pool.write { db in
            try db.execute(
                sql: """
                    INSERT INTO apptimist_files (owner, name, contents) VALUES (?, ?, ?)
                    ON CONFLICT (owner, name) DO UPDATE SET contents = excluded.contents
                    """,
                arguments: [Data(owner), Data(name), Data(contents)])
            if let notice, let noticeHeader { try Self.queueNotice(notice, header: noticeHeader, owner: owner, file: name, db) }
        }
    }

    func removeFile(owner: [UInt8], name: [UInt8], notice: ApptimistQueuedMessage?) async throws -> Bool {
        let noticeHeader = try notice.map { try Self.header(of: $0) }
        return try await pool.write { db in
            try db.execute(sql: "DELETE FROM apptimist_files WHERE owner = ? AND name = ?", arguments: [Data(owner), Data(name)])
            guard db.changesCount > 0 else { return false }
            if let notice, let noticeHeader { try Self.queueNotice(notice, header: noticeHeader, owner: owner, file: name, db) }
            return true
        }
    }

    func queueMissingNotices(owner: [UInt8], notice: @escaping @Sendable ([UInt8], [UInt8]) throws -> ApptimistQueuedMessage) async throws {
        try await pool.write { db in
            let files = try Row.fetchAll(db, sql: """
                SELECT name, contents FROM apptimist_files f WHERE owner = ?1
                AND NOT EXISTS (SELECT 1 FROM apptimist_messages m WHERE m.owner = ?1 AND m.notice_file = f.name)
                """, arguments: [Data(owner)])
            for file in files {
                let name = Array(file["name"] as Data)
                let message = try notice(name, Array(file["contents"] as Data))
                try Self.insert(message, header: try Self.header(of: message), owner: owner, noticeFile: name, db)
            }
        }
    }

    private static func header(of message: ApptimistQueuedMessage) throws -> [UInt8] {
        try ApptimistHeader(version: message.version, pdu: message.pdu).render()
    }

    /// A file notice in place of the owner's earlier notice of the same file (at most one each).
    private static func queueNotice(_ notice: ApptimistQueuedMessage, header: [UInt8], owner: [UInt8], file: [UInt8], _ db: Database) throws {
        try db.execute(sql: "DELETE FROM apptimist_messages WHERE owner = ? AND notice_file = ?", arguments: [Data(owner), Data(file)])
        try insert(notice, header: header, owner: owner, noticeFile: file, db)
    }

    /// One queue entry (nothing when the owner has no account, or already has that id).
    private static func insert(_ message: ApptimistQueuedMessage, header: [UInt8], owner: [UInt8], noticeFile: [UInt8]?, _ db: Database) throws {
        try db.execute(
            sql: """
                INSERT INTO apptimist_messages (owner, message_id, version, header, data_nonce, data, notice_file, cross_id, literal_id)
                SELECT ?, ?, ?, ?, ?, ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM apptimist_accounts WHERE public_key = ?)
                ON CONFLICT (owner, message_id) DO NOTHING
                """,
            arguments: [
                Data(owner), Data(message.id), Int(message.version.rawValue), Data(header),
                message.data.nonce.map { Data($0) }, Data(message.data.sealed), noticeFile.map { Data($0) },
                message.crossID.map { Data($0) }, message.literalID.map { Data($0) }, Data(owner),
            ])
    }

    func queueMessages(_ copies: [(owner: [UInt8], message: ApptimistQueuedMessage)]) async throws {
        let rows = try copies.map { copy in (copy, try Self.header(of: copy.message)) }
        try await pool.write { db in
            for ((owner, message), header) in rows { try Self.insert(message, header: header, owner: owner, noticeFile: nil, db) }
        }
    }

    func messages(owner: [UInt8], after seq: Int64, limit: Int) async throws -> [ApptimistQueuedMessage] {
        try await pool.read { db in
            try Row.fetchAll(
                db, sql: "SELECT * FROM apptimist_messages WHERE owner = ? AND seq > ? ORDER BY seq LIMIT ?",
                arguments: [Data(owner), seq, limit]
            ).map(Self.message)
        }
    }

    private static func message(_ row: Row) throws -> ApptimistQueuedMessage {
        try ApptimistQueuedMessage(
            stored: row["seq"], id: Array(row["message_id"] as Data), crossID: (row["cross_id"] as Data?).map { Array($0) },
            literalID: (row["literal_id"] as Data?).map { Array($0) }, version: row["version"], header: Array(row["header"] as Data),
            nonce: (row["data_nonce"] as Data?).map { Array($0) }, data: Array(row["data"] as Data))
    }

    func replayStart(owner: [UInt8], head: [UInt8], max: UInt16) async throws -> Int64 {
        let window = try await pool.read { db in
            try Row.fetchAll(
                db, sql: "SELECT seq, message_id, cross_id, literal_id FROM apptimist_messages WHERE owner = ? ORDER BY seq DESC LIMIT ?",
                arguments: [Data(owner), max == 0 ? -1 : Int(max)]
            ).map { row in
                ApptimistQueuedMessage.Names(
                    seq: row["seq"], id: Array(row["message_id"] as Data), crossID: (row["cross_id"] as Data?).map { Array($0) },
                    literalID: (row["literal_id"] as Data?).map { Array($0) })
            }
        }
        return ApptimistQueuedMessage.replayStart(window: window, head: head, max: max)
    }

    func truncate(owner: [UInt8], id: [UInt8]) async throws -> ApptimistQueuedMessage? {
        try await pool.write { db in
            try Row.fetchOne(
                db, sql: "DELETE FROM apptimist_messages WHERE owner = ?1 AND (message_id = ?2 OR cross_id = ?2 OR literal_id = ?2) RETURNING *",
                arguments: [Data(owner), Data(id)]
            ).map(Self.message)
        }
    }

    func recordLogin(publicKey: [UInt8], version: ApptimistVersion) async throws {
        try await pool.write { db in
            try db.execute(
                sql: "UPDATE apptimist_accounts SET login_versions = login_versions | ? WHERE public_key = ?",
                arguments: [version.bit, Data(publicKey)])
        }
    }

    func recordHeaderLayout(publicKey: [UInt8], layout: ApptimistHeaderLayout) async throws {
        try await pool.write { db in
            try db.execute(
                sql: "UPDATE apptimist_accounts SET speaks_header_lines = ? WHERE public_key = ?",
                arguments: [layout == .headerLines, Data(publicKey)])
        }
    }

    func setVouch(subject: [UInt8], voucher: [UInt8], signature: [UInt8]?) async throws {
        try await pool.write { db in
            if let signature {
                try db.execute(
                    sql: """
                        INSERT INTO apptimist_vouches (subject, voucher, signature) VALUES (?, ?, ?)
                        ON CONFLICT (subject, voucher) DO UPDATE SET signature = excluded.signature
                        """,
                    arguments: [Data(subject), Data(voucher), Data(signature)])
            } else {
                try db.execute(sql: "DELETE FROM apptimist_vouches WHERE subject = ? AND voucher = ?", arguments: [Data(subject), Data(voucher)])
            }
        }
    }

    func vouchers(subject: [UInt8]) async throws -> [[UInt8]] {
        try await pool.read { db in
            try Data.fetchAll(db, sql: "SELECT voucher FROM apptimist_vouches WHERE subject = ? ORDER BY voucher", arguments: [Data(subject)])
                .map { Array($0) }
        }
    }

    func takeLock(owner: [UInt8], name: [UInt8], holder: ApptimistLockHolder, lifetime: Duration) async throws -> Bool {
        locks.take(ApptimistFileLocks.Key(owner: owner, name: name), by: holder, lifetime: lifetime)
    }

    func isLocked(owner: [UInt8], name: [UInt8], byOtherThan holder: ApptimistLockHolder) async throws -> Bool {
        locks.isHeld(ApptimistFileLocks.Key(owner: owner, name: name), byOtherThan: holder)
    }

    func releaseLock(owner: [UInt8], name: [UInt8], holder: ApptimistLockHolder) async throws {
        locks.release(ApptimistFileLocks.Key(owner: owner, name: name), by: holder)
    }

    func releaseLocks(holder: ApptimistLockHolder) async throws {
        locks.releaseAll(of: holder)
    }
}
