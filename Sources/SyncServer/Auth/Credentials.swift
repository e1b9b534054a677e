import SyncProtocol

/// Username and password rules of the auth API.
enum CredentialRules {
    static let maxPasswordLength = 1024

    /// The `auth:` reply carries the username raw and clients read JSON there as a failure
    /// (DESIGN "Protocol facts"), so SyncProtocol's `Username` rules also bound account creation.
    static func validate(username: String) throws(SyncServerError) {
        guard Username.isValid(username), username.first != " ", username.last != " " else {
            throw .invalidUsername(username)
        }
    }

    static func validate(password: String) throws(SyncServerError) {
        guard !password.isEmpty, password.utf8.count <= maxPasswordLength else { throw .invalidPassword }
    }
}

/// What every store writes for a new account, made the same way whichever store it is: the
/// name and password checked, the password hashed on the hashing queue, a first token and a
/// public user id.
struct NewAccount: Sendable {
    var hashed: (hash: [UInt8], salt: [UInt8], iterations: Int)
    var token: String
    var publicID: String

    static func make(username: String, password: String, hasher: PasswordHasher, queue: HashingQueue) async throws -> NewAccount {
        try CredentialRules.validate(username: username)
        try CredentialRules.validate(password: password)
        let hashed = try await queue.run { try hasher.hash(password) }
        return NewAccount(hashed: hashed, token: TokenGenerator.generate(), publicID: TokenGenerator.generateUserID())
    }
}

/// A user's password record, read before the (slow) check runs outside the database.
struct StoredPassword: Sendable {
    var userID: Int64
    var publicID: String
    var hash: [UInt8]
    var salt: [UInt8]
    var iterations: Int

    /// The record `password` opens, checked on the hashing queue. A name without one (`stored`
    /// nil) costs the same work as a real check, so timing does not reveal which names exist.
    static func check(
        _ password: String, against stored: StoredPassword?, of username: String, hasher: PasswordHasher, queue: HashingQueue
    ) async throws -> StoredPassword {
        guard let stored else {
            _ = try await queue.run { try? hasher.hash(password) }
            throw SyncServerError.unknownUser(username)
        }
        let matches = try await queue.run {
            try PasswordHasher.verify(password, hash: stored.hash, salt: stored.salt, iterations: stored.iterations)
        }
        guard matches else { throw SyncServerError.wrongPassword }
        return stored
    }
}
