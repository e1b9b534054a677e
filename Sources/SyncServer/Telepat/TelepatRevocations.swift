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
    private let path: String?
    private let logger: Logger

    init(path: String?, logger: Logger) {
        self.path = path
        self.logger = logger
        if let path, let data = FileManager.default.contents(atPath: path),
           let object = (try? JSONValue(parsing: Array(data)))?.objectValue {
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
        guard let path else { return }
        let json = JSONValue.object(JSONObject(uniqueKeysWithValues: revoked.map { (JSONKey($0.key), JSONValue.integer($0.value)) }))
        do {
            // Written whole then renamed: a crash leaves the old list or the new one.
            try Data(json.compactRenderedBytes()).write(to: URL(fileURLWithPath: path), options: .atomic)
        } catch {
            logger.error("cannot save revoked Telepat tokens", metadata: ["path": "\(path)", "error": "\(error)"])
        }
    }

    private static func digest(_ token: String) -> String {
        SHA256.hash(data: Array(token.utf8)).map { String(format: "%02x", $0) }.joined()
    }
}
