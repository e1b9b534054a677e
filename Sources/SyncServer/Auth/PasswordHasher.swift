import Crypto
import _CryptoExtras
import Foundation

/// PBKDF2-HMAC-SHA256 password hashing with a per-user random salt.
struct PasswordHasher: Sendable {
    /// Iterations for new passwords; stored per user so it can be raised later.
    var iterations: Int

    static let saltByteCount = 16
    static let hashByteCount = 32

    /// A salted hash for a new password.
    func hash(_ password: String) throws -> (hash: [UInt8], salt: [UInt8], iterations: Int) {
        var salt = [UInt8](repeating: 0, count: Self.saltByteCount)
        var generator = SystemRandomNumberGenerator()
        for index in salt.indices { salt[index] = generator.next() }
        let hash = try Self.derive(password, salt: salt, iterations: iterations)
        return (hash, salt, iterations)
    }

    /// Whether `password` matches the stored hash, compared in constant time.
    static func verify(_ password: String, hash: [UInt8], salt: [UInt8], iterations: Int) throws -> Bool {
        let candidate = try derive(password, salt: salt, iterations: iterations)
        return constantTimeEqual(candidate, hash)
    }

    private static func derive(_ password: String, salt: [UInt8], iterations: Int) throws -> [UInt8] {
        let key = try KDF.Insecure.PBKDF2.deriveKey(
            from: Array(password.utf8),
            salt: salt,
            using: .sha256,
            outputByteCount: hashByteCount,
            unsafeUncheckedRounds: iterations
        )
        return key.withUnsafeBytes { Array($0) }
    }
}

/// Compares two byte arrays without an early exit, so timing does not reveal the matching prefix.
func constantTimeEqual(_ lhs: [UInt8], _ rhs: [UInt8]) -> Bool {
    guard lhs.count == rhs.count else { return false }
    var difference: UInt8 = 0
    for index in lhs.indices { difference |= lhs[index] ^ rhs[index] }
    return difference == 0
}
