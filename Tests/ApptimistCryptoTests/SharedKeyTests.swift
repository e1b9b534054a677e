import ApptimistCrypto
import ApptimistProtocol
import Testing

/// crypto_box with a key computed once per key pair (crypto_box_beforenm, then the _afternm
/// calls), as ApptimistChannel seals and opens: the same bytes as crypto_box_easy, so what goes
/// on the wire is what it was.
@Suite("Apptimist crypto: precomputed keys")
struct SharedKeyTests {
    typealias Vector = PublishedVectorTests

    @Test func libsodiumsVectorFromEitherSidesKey() throws {
        let message = try [UInt8](hex: Vector.message)
        let nonce = try [UInt8](hex: Vector.nonce)
        let alices = try CryptoBox.sharedKey(publicKey: [UInt8](hex: Vector.bobPublic), secretKey: [UInt8](hex: Vector.aliceSecret))
        let bobs = try CryptoBox.sharedKey(publicKey: [UInt8](hex: Vector.alicePublic), secretKey: [UInt8](hex: Vector.bobSecret))
        #expect(try CryptoBox.seal(message, nonce: nonce, shared: alices).hex == Vector.sealed)
        #expect(try CryptoBox.open([UInt8](hex: Vector.sealed), nonce: nonce, shared: bobs).hex == Vector.message)
    }

    @Test func theSameBytesAsCryptoBoxEasyAndEachOpensTheOther() throws {
        for size in [0, 1, 31, 1_024, 70_000] {
            let alice = try BoxKeyPair.generate()
            let bob = try BoxKeyPair.generate()
            let nonce = try CryptoBox.randomNonce()
            let message = (0 ..< size).map { UInt8(truncatingIfNeeded: $0 &* 131 &+ 7) }
            let shared = try CryptoBox.sharedKey(publicKey: bob.publicKey, secretKey: alice.secretKey)
            let easy = try CryptoBox.seal(message, nonce: nonce, recipientPublicKey: bob.publicKey, senderSecretKey: alice.secretKey)
            let precomputed = try CryptoBox.seal(message, nonce: nonce, shared: shared)
            #expect(precomputed == easy)
            #expect(try CryptoBox.open(easy, nonce: nonce, shared: shared) == message)
            #expect(try CryptoBox.open(precomputed, nonce: nonce, senderPublicKey: alice.publicKey, recipientSecretKey: bob.secretKey) == message)
            var tampered = precomputed
            tampered[tampered.count - 1] ^= 1
            #expect(throws: ApptimistCryptoError.boxRejected) { try CryptoBox.open(tampered, nonce: nonce, shared: shared) }
        }
    }

    @Test func aLowOrderPublicKeyHasNoSharedKey() throws {
        let smallOrder = try [UInt8](hex: "e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800")
        #expect(throws: ApptimistCryptoError.weakPublicKey) {
            try CryptoBox.sharedKey(publicKey: smallOrder, secretKey: [UInt8](hex: Vector.aliceSecret))
        }
    }

    /// A version 1 frame sealed by the channel is, byte for byte, the seed's: its header and its
    /// data each crypto_box_easy'd with the seed's nonces, framed.
    @Test func aVersion1FrameIsTheSeedsBytes() throws {
        let service = try ApptimistIdentity.generate(name: "service")
        let serviceKey = try ApptimistServiceKey(service: "notes", identity: service)
        let device = try BoxKeyPair.generate()
        let user = try BoxKeyPair.generate()
        var client = try ApptimistChannel(version: .v1, own: device, peerPublicKey: service.box.publicKey, serviceDataNonce: serviceKey.dataNonce)
        var server = try ApptimistChannel(version: .v1, own: service.box, peerPublicKey: device.publicKey, serviceDataNonce: serviceKey.dataNonce)
        let fields = ApptimistFileFields(publicKey: user.publicKey, filename: Array("notes.txt".utf8))
        for round in 0 ..< 3 {
            let plain = Array("round \(round)".utf8)
            let seq = server.nextIncoming
            let frame = try client.seal(.write(fields), data: try client.sealData(plain, to: service.box.publicKey, from: user.secretKey))
            let header = try CryptoBox.seal(
                try ApptimistHeader(version: .v1, pdu: .write(fields)).render(),
                nonce: try ApptimistVersion.v1.headerNonce(prefix: serviceKey.dataNonce, seq: seq),
                recipientPublicKey: service.box.publicKey, senderSecretKey: device.secretKey)
            let data = try CryptoBox.seal(plain, nonce: serviceKey.dataNonce, recipientPublicKey: service.box.publicKey, senderSecretKey: user.secretKey)
            #expect(frame == (try ApptimistFrame(sealedHeader: header, sealedData: data).render(version: .v1)))
            let received = try server.open(frame)
            #expect(try server.openData(received.data, from: user.publicKey, to: service.box.secretKey) == plain)
        }
    }
}
