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
