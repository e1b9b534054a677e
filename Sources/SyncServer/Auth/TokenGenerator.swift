import Crypto

/// Access tokens: 32 random alphanumerics handed to the user once, stored only as SHA-256 digests.
enum TokenGenerator {
    static let length = 32
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789".utf8)

    /// A fresh token from the system CSPRNG (rejection-free: 62 symbols, modulo bias removed by retry).
    static func generate() -> String {
        var generator = SystemRandomNumberGenerator()
        var bytes: [UInt8] = []
        bytes.reserveCapacity(length)
        while bytes.count < length {
            let random = generator.next() as UInt8
            // 248 = 4 * 62: values above it would favour the first symbols.
            if random < 248 { bytes.append(alphabet[Int(random) % alphabet.count]) }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The stored form of a token.
    static func digest(_ token: String) -> [UInt8] {
        Array(SHA256.hash(data: Array(token.utf8)))
    }

    /// A random public user id: 32 lowercase hex digits, like the reference service's `userid`.
    static func generateUserID() -> String {
        var generator = SystemRandomNumberGenerator()
        let hex = Array("0123456789abcdef".utf8)
        var bytes: [UInt8] = []
        for _ in 0..<32 { bytes.append(hex[Int((generator.next() as UInt8) & 0x0F)]) }
        return String(decoding: bytes, as: UTF8.self)
    }
}
