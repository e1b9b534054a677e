import CSodium

/// An Ed25519 key pair (the protocol's "AuthKey" pairs). The secret key is libsodium's 64 bytes
/// (seed then public key); the 32-byte seed is what an identity file needs to keep.
public struct SigningKeyPair: Hashable, Sendable {
    public static let seedLength = 32
    public static let publicKeyLength = 32
    public static let secretKeyLength = 64

    public let publicKey: [UInt8]
    public let secretKey: [UInt8]

    public var seed: [UInt8] { Array(secretKey.prefix(Self.seedLength)) }

    public static func generate() throws(ApptimistCryptoError) -> SigningKeyPair {
        try SigningKeyPair(seed: Sodium.random(count: seedLength))
    }

    /// The key pair of a 32-byte seed (RFC 8032's "private key").
    public init(seed: [UInt8]) throws(ApptimistCryptoError) {
        try Sodium.ready()
        try Sodium.check(seed, "an Ed25519 seed", length: Self.seedLength)
        var publicKey = [UInt8](repeating: 0, count: Self.publicKeyLength)
        var secretKey = [UInt8](repeating: 0, count: Self.secretKeyLength)
        let status = publicKey.withNonNilMutablePointer { pk in
            secretKey.withNonNilMutablePointer { sk in
                seed.withNonNilPointer { crypto_sign_seed_keypair(pk, sk, $0) }
            }
        }
        guard status == 0 else { throw .libraryUnavailable }
        self.publicKey = publicKey
        self.secretKey = secretKey
    }
}

/// Ed25519 detached signatures (64 bytes), as the protocol's `ed25519(secAuthKey, bytes)`.
public enum Ed25519 {
    public static let signatureLength = 64

    public static func sign(_ message: [UInt8], secretKey: [UInt8]) throws(ApptimistCryptoError) -> [UInt8] {
        try Sodium.ready()
        try Sodium.check(secretKey, "an Ed25519 secret key", length: SigningKeyPair.secretKeyLength)
        var signature = [UInt8](repeating: 0, count: signatureLength)
        let status = signature.withNonNilMutablePointer { out in
            message.withNonNilPointer { m in
                secretKey.withNonNilPointer { sk in
                    crypto_sign_detached(out, nil, m, UInt64(message.count), sk)
                }
            }
        }
        guard status == 0 else { throw .libraryUnavailable }
        return signature
    }

    /// Returns normally only when `signature` is `publicKey`'s signature of exactly `message`.
    public static func verify(_ signature: [UInt8], of message: [UInt8], publicKey: [UInt8]) throws(ApptimistCryptoError) {
        try Sodium.ready()
        try Sodium.check(publicKey, "an Ed25519 public key", length: SigningKeyPair.publicKeyLength)
        guard signature.count == signatureLength else { throw .signatureRejected }
        let status = signature.withNonNilPointer { s in
            message.withNonNilPointer { m in
                publicKey.withNonNilPointer { pk in crypto_sign_verify_detached(s, m, UInt64(message.count), pk) }
            }
        }
        guard status == 0 else { throw .signatureRejected }
    }
}
