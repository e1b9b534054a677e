/// Why a key, box or signature was refused. A box that does not open or a signature that does
/// not verify is an error value like any other: peers send such bytes, a crash is never the answer.
public enum ApptimistCryptoError: Error, Hashable, Sendable {
    /// sodium_init failed (libsodium could not set itself up; nothing is safe to compute).
    case libraryUnavailable
    /// A key, nonce or signature of the wrong size (which, what size it must be, what it was).
    case wrongLength(String, expected: Int, actual: Int)
    /// The box does not open: forged, corrupted, truncated, or sealed for another key pair or nonce.
    case boxRejected
    /// The signature does not verify against that message and public key.
    case signatureRejected
    /// libsodium refused to seal for this public key (a low-order point: no shared secret).
    case weakPublicKey
}

extension ApptimistCryptoError: CustomStringConvertible {
    public var description: String {
        switch self {
        case .libraryUnavailable: return "libsodium could not be initialised"
        case .wrongLength(let what, let expected, let actual): return "\(what) must be \(expected) bytes, not \(actual)"
        case .boxRejected: return "the box does not open (forged, corrupted, or sealed for another key or nonce)"
        case .signatureRejected: return "the signature does not verify"
        case .weakPublicKey: return "the public key is a low-order point; nothing can be sealed for it"
        }
    }
}
