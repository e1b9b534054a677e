import Crypto
import Foundation
import JSONDiff
import Logging
import NIOConcurrencyHelpers

/// JWTs revoked by `/user/logout` before they expire, by digest, each kept until its expiry
/// (then it is refused anyway). Kept in a JSON file when the server has a data directory, so a
/// restart with the same `jwt_secret` does not bring them back; on PostgreSQL, in memory (a
/// restart, or another node, still takes a logged-out token until it expires).
final class TelepatRevocations: Sendable {
    private let revoked = NIOLockedValueBox<[String: Int64]>([:])
    private let file: JSONObjectFile

    init(path: String?, logger: Logger) {
        file = JSONObjectFile(path: path, holding: "revoked Telepat tokens", logger: logger)
        if let object = file.load() {
            let now = TelepatFrontEnd.now()
            revoked.withLockedValue { revoked in
                for (digest, expiry) in object {
                    if case .integer(let expires) = expiry, expires > now { revoked[digest.string] = expires }
                }
            }
        }
    }

    /// Revokes `token` (valid until `expires`, Unix seconds).
    func revoke(_ token: String, expires: Int64) {
        let now = TelepatFrontEnd.now()
        revoked.withLockedValue { revoked in
            revoked = revoked.filter { $0.value > now }
            revoked[Self.digest(token)] = expires
            // Under the lock, so the file never goes back to an older list (logouts are rare).
            persist(revoked)
        }
    }

    func isRevoked(_ token: String) -> Bool {
        let digest = Self.digest(token)
        return revoked.withLockedValue { $0[digest] != nil }
    }

    private func persist(_ revoked: [String: Int64]) {
        file.save(JSONObject(uniqueKeysWithValues: revoked.map { (JSONKey($0.key), JSONValue.integer($0.value)) }))
    }

    private static func digest(_ token: String) -> String {
        SHA256.hash(data: Array(token.utf8)).map { String(format: "%02x", $0) }.joined()
    }
}
