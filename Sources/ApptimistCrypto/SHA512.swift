import CSodium

/// SHA-512, for the protocol's message ids (`sha512(messageHeader eData)`).
public enum SHA512 {
    public static let digestLength = 64

    public static func digest(_ bytes: [UInt8]) throws(ApptimistCryptoError) -> [UInt8] {
        try Sodium.ready()
        var digest = [UInt8](repeating: 0, count: digestLength)
        let status = digest.withNonNilMutablePointer { out in
            bytes.withNonNilPointer { crypto_hash_sha512(out, $0, UInt64(bytes.count)) }
        }
        guard status == 0 else { throw .libraryUnavailable }
        return digest
    }
}
