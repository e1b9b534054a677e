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
