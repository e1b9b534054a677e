import Foundation
import GRDB

/// What the auth API returns: the user's name, a fresh access token and the public user id.
public struct UserCredentials: Sendable, Hashable, Codable {
    public var username: String
    public var accessToken: String
    public var userID: String

    public init(username: String, accessToken: String, userID: String) {
        self.username = username
        self.accessToken = accessToken
        self.userID = userID
    }
}


/// The user a token belongs to.
struct AuthenticatedUser: Sendable, Hashable {
    var id: Int64
    var username: String
}

extension ServerStore {
    /// Creates a user and returns a first access token. Throws `userExists` for a taken name.
    public func createUser(username: String, password: String) async throws -> UserCredentials {
        let account = try await NewAccount.make(username: username, password: password, hasher: passwordHasher, queue: hashingQueue)
        let (hashed, token, publicID) = (account.hashed, account.token, account.publicID)
        return try await pool.write { db in
            if try Int64.fetchOne(db, sql: "SELECT id FROM users WHERE username = ?", arguments: [username]) != nil {
                throw SyncServerError.userExists(username)
            }
            try db.execute(
                sql: """
                    INSERT INTO users (username, public_id, password_hash, password_salt, password_iterations, created_at)
                    VALUES (?, ?, ?, ?, ?, ?)
                    """,
                arguments: [username, publicID, Data(hashed.hash), Data(hashed.salt), hashed.iterations, Date().timeIntervalSince1970]
            )
            try Self.insertToken(token, userID: db.lastInsertedRowID, db: db)
            return UserCredentials(username: username, accessToken: token, userID: publicID)
        }
    }

    /// Checks a password and returns a new access token (older tokens stay valid).
    public func authorize(username: String, password: String) async throws -> UserCredentials {
        let found = try await pool.read { db in
            try Row.fetchOne(
                db,
                sql: "SELECT id, public_id, password_hash, password_salt, password_iterations FROM users WHERE username = ?",
                arguments: [username]
            ).map { row in
                StoredPassword(
                    userID: row["id"], publicID: row["public_id"], hash: Array(row["password_hash"] as Data),
                    salt: Array(row["password_salt"] as Data), iterations: row["password_iterations"]
                )
            }
        }
        let stored = try await StoredPassword.check(password, against: found, of: username, hasher: passwordHasher, queue: hashingQueue)
        let userID = stored.userID
        let publicID = stored.publicID
        let token = TokenGenerator.generate()
        try await pool.write { db in try Self.insertToken(token, userID: userID, db: db) }
        return UserCredentials(username: username, accessToken: token, userID: publicID)
    }

    /// Issues a new access token for an existing user without a password (the operator's CLI).
    public func issueToken(username: String) async throws -> UserCredentials {
        let token = TokenGenerator.generate()
        return try await pool.write { db in
            guard let row = try Row.fetchOne(db, sql: "SELECT id, public_id FROM users WHERE username = ?", arguments: [username]) else {
                throw SyncServerError.unknownUser(username)
            }
            try Self.insertToken(token, userID: row["id"], db: db)
            return UserCredentials(username: username, accessToken: token, userID: row["public_id"])
        }
    }

    /// The user owning `token`, or nil when no such token exists.
    func user(forToken token: String) async throws -> AuthenticatedUser? {
        let digest = Data(TokenGenerator.digest(token))
        return try await pool.read { db in
            // Lookup by digest: the secret never reaches SQL, and comparing digests leaks nothing useful.
            try Row.fetchOne(
                db,
                sql: "SELECT users.id, users.username FROM tokens JOIN users ON users.id = tokens.user_id WHERE tokens.token_hash = ?",
                arguments: [digest]
            ).map { AuthenticatedUser(id: $0["id"], username: $0["username"]) }
        }
    }

    /// The user named `username`, or nil when there is none.
    func user(named username: String) async throws -> AuthenticatedUser? {
        try await pool.read { db in
            try Row.fetchOne(db, sql: "SELECT id, username FROM users WHERE username = ?", arguments: [username])
                .map { AuthenticatedUser(id: $0["id"], username: $0["username"]) }
        }
    }

    private static func insertToken(_ token: String, userID: Int64, db: Database) throws {
        try db.execute(
            sql: "INSERT INTO tokens (token_hash, user_id, created_at) VALUES (?, ?, ?)",
            arguments: [Data(TokenGenerator.digest(token)), userID, Date().timeIntervalSince1970]
        )
    }
}
