import ApptimistCrypto
import Testing

/// libsodium's own test vectors (test/default/box.c and box.exp, NaCl's classic Alice and Bob),
/// RFC 8032's Ed25519 vectors and FIPS 180-2's SHA-512: the bytes this module produces are the
/// published ones.
@Suite("Apptimist crypto: published test vectors")
struct PublishedVectorTests {
    static let aliceSecret = "77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a"
    static let alicePublic = "8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a"
    static let bobSecret = "5dab087e624a8a4b79e17f8b83800ee66f3bb1292618b6fd1c2f8b27ff88e0eb"
    static let bobPublic = "de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f"
    static let nonce = "69696ee955b62b73cd62bda875fc73d68219e0036b7a0b37"
    static let message =
        "be075fc53c81f2d5cf141316ebeb0c7b5228c52a4c62cbd44b66849b64244ffce5ecbaaf33bd751a1ac728d45e6c61296cdc3c01233561f4"
        + "1db66cce314adb310e3be8250c46f06dceea3a7fa1348057e2f6556ad6b1318a024a838f21af1fde048977eb48f59ffd4924ca1c60902e52"
        + "f0a089bc76897040e082f937763848645e0705"
    /// box.exp: crypto_box's output from byte 16 on (the authenticator, then the ciphertext).
    static let sealed =
        "f3ffc7703f9400e52a7dfb4b3d3305d98e993b9f48681273c29650ba32fc76ce48332ea7164d96a4476fb8c531a1186ac0dfc17c98dce87b"
        + "4da7f011ec48c97271d2c20f9b928fe2270d6fb863d51738b48eeee314a7cc8ab932164548e526ae90224368517acfeabd6bb3732bc0e9da"
        + "99832b61ca01b6de56244a9e88d5f9b37973f622a43d14a6599b1f654cb45a74e355a5"

    @Test func boxSealsAliceToBobAsLibsodiumsVector() throws {
        let sealed = try CryptoBox.seal(
            [UInt8](hex: Self.message), nonce: [UInt8](hex: Self.nonce),
            recipientPublicKey: [UInt8](hex: Self.bobPublic), senderSecretKey: [UInt8](hex: Self.aliceSecret))
        #expect(sealed.hex == Self.sealed)
    }

    @Test func bobOpensTheVectorWithAlicesPublicKey() throws {
        let opened = try CryptoBox.open(
            [UInt8](hex: Self.sealed), nonce: [UInt8](hex: Self.nonce),
            senderPublicKey: [UInt8](hex: Self.alicePublic), recipientSecretKey: [UInt8](hex: Self.bobSecret))
        #expect(opened.hex == Self.message)
    }

    @Test func publicKeysDeriveFromSecretKeys() throws {
        #expect(try BoxKeyPair(secretKey: [UInt8](hex: Self.aliceSecret)).publicKey.hex == Self.alicePublic)
        #expect(try BoxKeyPair(secretKey: [UInt8](hex: Self.bobSecret)).publicKey.hex == Self.bobPublic)
    }

    /// box.c's small-order point: crypto_box refuses to seal for it.
    @Test func aLowOrderPublicKeyIsRefused() throws {
        let smallOrder = try [UInt8](hex: "e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800")
        #expect(throws: ApptimistCryptoError.weakPublicKey) {
            try CryptoBox.seal(
                [1, 2, 3], nonce: [UInt8](hex: Self.nonce), recipientPublicKey: smallOrder,
                senderSecretKey: [UInt8](hex: Self.aliceSecret))
        }
    }

    /// RFC 8032 section 7.1, TEST 1 (empty message), TEST 2 (one byte) and TEST 3 (two bytes).
    @Test(arguments: [
        (
            "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
            "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a", "",
            "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"
        ),
        (
            "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
            "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c", "72",
            "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00"
        ),
        (
            "c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7",
            "fc51cd8e6218a1a38da47ed00230f0580816ed13ba3303ac5deb911548908025", "af82",
            "6291d657deec24024827e69c3abe01a30ce548a284743a445e3680d7db5ac3ac18ff9b538d16f290ae67f760984dc6594a7c15e9716ed28dc027beceea1ec40a"
        ),
    ])
    func ed25519SignsAsRFC8032(seed: String, publicKey: String, message: String, signature: String) throws {
        let pair = try SigningKeyPair(seed: [UInt8](hex: seed))
        #expect(pair.publicKey.hex == publicKey)
        #expect(pair.seed.hex == seed)
        let signed = try Ed25519.sign([UInt8](hex: message), secretKey: pair.secretKey)
        #expect(signed.hex == signature)
        try Ed25519.verify([UInt8](hex: signature), of: [UInt8](hex: message), publicKey: [UInt8](hex: publicKey))
    }

    /// FIPS 180-2's SHA-512 examples ("abc") and the empty message.
    @Test func sha512DigestsAsPublished() throws {
        #expect(
            try SHA512.digest(Array("abc".utf8)).hex
                == "ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9eeee64b55d39a2192992a274fc1a836ba3c23a3feebbd454d4423643ce80e2a9ac94fa54ca49f")
        #expect(
            try SHA512.digest([]).hex
                == "cf83e1357eefb8bdf1542850d66d8007d620e4050b5715dc83f4a921d36ce9ce47d0d13c5d85f2b0ff8318d2877eec2f63b931bd47417a81a538327af927da3e")
    }
}
