import ApptimistCrypto
import Testing

/// Whatever a peer sends, a box that does not open or a signature that does not verify is an
/// error value (the process lives on), and a wrong-sized key or nonce says which and how big.
@Suite("Apptimist crypto: refusals")
struct RefusalTests {
    let alice: BoxKeyPair
    let bob: BoxKeyPair
    let nonce: [UInt8]
    let sealed: [UInt8]
    let message: [UInt8] = Array("a message for bob".utf8)

    init() throws {
        alice = try BoxKeyPair.generate()
        bob = try BoxKeyPair.generate()
        nonce = try CryptoBox.randomNonce()
        sealed = try CryptoBox.seal(message, nonce: nonce, recipientPublicKey: bob.publicKey, senderSecretKey: alice.secretKey)
    }

    @Test func aGeneratedPairRoundTripsAndAnEmptyMessageToo() throws {
        #expect(sealed.count == message.count + CryptoBox.macLength)
        #expect(try CryptoBox.open(sealed, nonce: nonce, senderPublicKey: alice.publicKey, recipientSecretKey: bob.secretKey) == message)
        let empty = try CryptoBox.seal([], nonce: nonce, recipientPublicKey: bob.publicKey, senderSecretKey: alice.secretKey)
        #expect(empty.count == CryptoBox.macLength)
        #expect(try CryptoBox.open(empty, nonce: nonce, senderPublicKey: alice.publicKey, recipientSecretKey: bob.secretKey) == [])
    }

    @Test func everyFlippedBitIsRefused() throws {
        for index in sealed.indices {
            var tampered = sealed
            tampered[index] ^= 0x80
            #expect(throws: ApptimistCryptoError.boxRejected) {
                try CryptoBox.open(tampered, nonce: nonce, senderPublicKey: alice.publicKey, recipientSecretKey: bob.secretKey)
            }
        }
    }

    @Test func anotherNonceOrKeyOrATruncatedBoxIsRefused() throws {
        let otherNonce = try CryptoBox.randomNonce()
        #expect(otherNonce != nonce)
        let eve = try BoxKeyPair.generate()
        let attempts: [([UInt8], [UInt8], [UInt8], [UInt8])] = [
            (sealed, otherNonce, alice.publicKey, bob.secretKey),
            (sealed, nonce, eve.publicKey, bob.secretKey),
            (sealed, nonce, alice.publicKey, eve.secretKey),
            (Array(sealed.dropLast()), nonce, alice.publicKey, bob.secretKey),
            (Array(sealed.prefix(CryptoBox.macLength - 1)), nonce, alice.publicKey, bob.secretKey),
            ([], nonce, alice.publicKey, bob.secretKey),
        ]
        for (box, nonce, sender, recipient) in attempts {
            #expect(throws: ApptimistCryptoError.boxRejected) {
                try CryptoBox.open(box, nonce: nonce, senderPublicKey: sender, recipientSecretKey: recipient)
            }
        }
    }

    @Test func wrongSizedInputsSayWhich() {
        #expect(throws: ApptimistCryptoError.wrongLength("a box nonce", expected: 24, actual: 23)) {
            try CryptoBox.seal([], nonce: Array(nonce.dropLast()), recipientPublicKey: bob.publicKey, senderSecretKey: alice.secretKey)
        }
        #expect(throws: ApptimistCryptoError.wrongLength("a box public key", expected: 32, actual: 0)) {
            try CryptoBox.open(sealed, nonce: nonce, senderPublicKey: [], recipientSecretKey: bob.secretKey)
        }
        #expect(throws: ApptimistCryptoError.wrongLength("a box secret key", expected: 32, actual: 33)) {
            try BoxKeyPair(secretKey: bob.secretKey + [0])
        }
        #expect(throws: ApptimistCryptoError.wrongLength("an Ed25519 seed", expected: 32, actual: 31)) {
            try SigningKeyPair(seed: Array(repeating: 1, count: 31))
        }
        #expect(throws: ApptimistCryptoError.wrongLength("an Ed25519 secret key", expected: 64, actual: 32)) {
            try Ed25519.sign([], secretKey: Array(repeating: 1, count: 32))
        }
    }

    @Test func aSignatureVerifiesOnlyItsMessageUnderItsKey() throws {
        let signer = try SigningKeyPair.generate()
        let other = try SigningKeyPair.generate()
        let signature = try Ed25519.sign(message, secretKey: signer.secretKey)
        try Ed25519.verify(signature, of: message, publicKey: signer.publicKey)
        var flipped = signature
        flipped[10] ^= 1
        let refused: [([UInt8], [UInt8], [UInt8])] = [
            (signature, message + [0], signer.publicKey),
            (signature, message, other.publicKey),
            (flipped, message, signer.publicKey),
            (Array(signature.dropLast()), message, signer.publicKey),
            (Array(repeating: 0, count: 64), message, signer.publicKey),
            ([], message, signer.publicKey),
        ]
        for (signature, message, key) in refused {
            #expect(throws: ApptimistCryptoError.signatureRejected) { try Ed25519.verify(signature, of: message, publicKey: key) }
        }
    }

    @Test func randomNoncesDiffer() throws {
        let nonces = try (0 ..< 64).map { _ in try CryptoBox.randomNonce() }
        #expect(Set(nonces).count == 64)
        #expect(nonces.allSatisfy { $0.count == CryptoBox.nonceLength })
    }
}
