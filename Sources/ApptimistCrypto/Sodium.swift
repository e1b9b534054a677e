import CSodium

/// sodium_init, run once per process (a global's initialiser runs exactly once, thread-safely)
/// before any other libsodium call: it picks implementations and seeds the random generator.
private let sodiumInitialised: Bool = sodium_init() >= 0

enum Sodium {
    static func ready() throws(ApptimistCryptoError) {
        guard sodiumInitialised else { throw .libraryUnavailable }
    }

    static func check(_ bytes: [UInt8], _ what: String, length: Int) throws(ApptimistCryptoError) {
        guard bytes.count == length else { throw .wrongLength(what, expected: length, actual: bytes.count) }
    }

    static func random(count: Int) throws(ApptimistCryptoError) -> [UInt8] {
        try ready()
        var bytes = [UInt8](repeating: 0, count: count)
        bytes.withNonNilMutablePointer { randombytes_buf($0, count) }
        return bytes
    }
}

extension Array where Element == UInt8 {
    /// A pointer that is never nil, even for no bytes (an empty array may have no storage, and
    /// libsodium's C signatures want an address beside a zero length).
    func withNonNilPointer<R>(_ body: (UnsafePointer<UInt8>) -> R) -> R {
        withUnsafeBufferPointer { buffer in
            if let base = buffer.baseAddress { return body(base) }
            var spare: UInt8 = 0
            return withUnsafePointer(to: &spare) { body($0) }
        }
    }

    /// The same for an output buffer.
    mutating func withNonNilMutablePointer<R>(_ body: (UnsafeMutablePointer<UInt8>) -> R) -> R {
        withUnsafeMutableBufferPointer { buffer in
            if let base = buffer.baseAddress { return body(base) }
            var spare: UInt8 = 0
            return withUnsafeMutablePointer(to: &spare) { body($0) }
        }
    }
}
