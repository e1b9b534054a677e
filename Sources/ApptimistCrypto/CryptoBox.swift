import CSodium

/// A Curve25519 key pair for crypto_box (the protocol's "EncrKey" pairs).
public struct BoxKeyPair: Hashable, Sendable {
    public let publicKey: [UInt8]
    public let secretKey: [UInt8]

    /// A fresh key pair from libsodium's random generator.
    public static func generate() throws(ApptimistCryptoError) -> BoxKeyPair {
        try BoxKeyPair(secretKey: Sodium.random(count: CryptoBox.keyLength))
    }

    /// The key pair of a stored secret key (its public key is derived, so the two always match).
    public init(secretKey: [UInt8]) throws(ApptimistCryptoError) {
        try Sodium.ready()
        try Sodium.check(secretKey, "a box secret key", length: CryptoBox.keyLength)
        var publicKey = [UInt8](repeating: 0, count: CryptoBox.keyLength)
        let status = publicKey.withNonNilMutablePointer { out in
            secretKey.withNonNilPointer { crypto_scalarmult_base(out, $0) }
        }
        guard status == 0 else { throw .weakPublicKey }
        self.publicKey = publicKey
        self.secretKey = secretKey
    }
}

/// NaCl's crypto_box (Curve25519, XSalsa20, Poly1305) with an explicit nonce: the sealed bytes
/// are the 16-byte authenticator followed by the ciphertext (libsodium's "easy" layout, which is
/// NaCl's crypto_box output without its 16 zero bytes).
public enum CryptoBox {
    public static let keyLength = 32
    public static let nonceLength = 24
    public static let macLength = 16

    /// A nonce from libsodium's random generator (24 bytes: random nonces do not collide).
    public static func randomNonce() throws(ApptimistCryptoError) -> [UInt8] {
        try Sodium.random(count: nonceLength)
    }

    /// crypto_box_easy: the same bytes as `seal(_:nonce:shared:)` with the pair's shared key,
    /// which is how it is computed (one piece of code for both).
    public static func seal(
        _ message: [UInt8], nonce: [UInt8], recipientPublicKey: [UInt8], senderSecretKey: [UInt8]
    ) throws(ApptimistCryptoError) -> [UInt8] {
        try seal(message, nonce: nonce, shared: sharedKey(publicKey: recipientPublicKey, secretKey: senderSecretKey))
    }

    /// crypto_box's key for one pair (crypto_box_beforenm: the X25519 agreement and HSalsa20),
    /// the same both ways (A's secret with B's public key, or B's with A's). Sealing and opening
    /// with it (`seal(_:nonce:shared:)`, `open(_:nonce:shared:)`) gives the same bytes as
    /// `seal`/`open` with the two keys, without redoing the agreement for every box.
    public struct SharedKey: Sendable {
        fileprivate let bytes: [UInt8]
    }

    public static func sharedKey(publicKey: [UInt8], secretKey: [UInt8]) throws(ApptimistCryptoError) -> SharedKey {
        try Sodium.ready()
        try Sodium.check(publicKey, "a box public key", length: keyLength)
        try Sodium.check(secretKey, "a box secret key", length: keyLength)
        var bytes = [UInt8](repeating: 0, count: crypto_box_beforenmbytes())
        let status = bytes.withNonNilMutablePointer { out in
            publicKey.withNonNilPointer { pk in secretKey.withNonNilPointer { sk in crypto_box_beforenm(out, pk, sk) } }
        }
        guard status == 0 else { throw .weakPublicKey }
        return SharedKey(bytes: bytes)
    }

    /// `seal` with a precomputed key (crypto_box_easy_afternm): the same bytes.
    public static func seal(_ message: [UInt8], nonce: [UInt8], shared: SharedKey) throws(ApptimistCryptoError) -> [UInt8] {
        try Sodium.ready()
        try Sodium.check(nonce, "a box nonce", length: nonceLength)
        var sealed = [UInt8](repeating: 0, count: macLength + message.count)
        let status = sealed.withNonNilMutablePointer { out in
            message.withNonNilPointer { m in
                nonce.withNonNilPointer { n in
                    shared.bytes.withNonNilPointer { k in crypto_box_easy_afternm(out, m, UInt64(message.count), n, k) }
                }
            }
        }
        guard status == 0 else { throw .weakPublicKey }
        return sealed
    }

    /// `open` with a precomputed key (crypto_box_open_easy_afternm).
    public static func open(_ sealed: [UInt8], nonce: [UInt8], shared: SharedKey) throws(ApptimistCryptoError) -> [UInt8] {
        try Sodium.ready()
        try Sodium.check(nonce, "a box nonce", length: nonceLength)
        guard sealed.count >= macLength else { throw .boxRejected }
        var message = [UInt8](repeating: 0, count: sealed.count - macLength)
        let status = message.withNonNilMutablePointer { out in
            sealed.withNonNilPointer { c in
                nonce.withNonNilPointer { n in
                    shared.bytes.withNonNilPointer { k in crypto_box_open_easy_afternm(out, c, UInt64(sealed.count), n, k) }
                }
            }
        }
        guard status == 0 else { throw .boxRejected }
        return message
    }

    /// crypto_box_open_easy, through the pair's shared key as `seal` is. A public key libsodium
    /// refuses opens nothing: the box is rejected, as crypto_box_open_easy would reject it.
    public static func open(
        _ sealed: [UInt8], nonce: [UInt8], senderPublicKey: [UInt8], recipientSecretKey: [UInt8]
    ) throws(ApptimistCryptoError) -> [UInt8] {
        let shared: SharedKey
        do {
            shared = try sharedKey(publicKey: senderPublicKey, secretKey: recipientSecretKey)
        } catch .weakPublicKey {
            throw .boxRejected
        }
        return try open(sealed, nonce: nonce, shared: shared)
    }
}
