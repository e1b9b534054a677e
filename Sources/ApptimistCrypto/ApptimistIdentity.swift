import ApptimistProtocol
import Foundation

/// A user's (or a service's) two key pairs: Curve25519 for crypto_box, Ed25519 for signatures.
/// `bucketfs apptimist keygen` writes one to an identity file; the mount reads it, and the
/// server keeps its own the same way in its database. The file is JSON, mode 0600:
///
///     {"format": "bucketfs-apptimist-identity/1", "name": "alice",
///      "box": {"public": "<64 hex>", "secret": "<64 hex>"},
///      "sign": {"public": "<64 hex>", "seed": "<64 hex>"}}
///
/// The public keys are derived from the secrets when read and must match what the file says,
/// so a file edited by hand cannot pair one user's secret with another's public key.
public struct ApptimistIdentity: Hashable, Sendable {
    public static let format = "bucketfs-apptimist-identity/1"

    /// A label for people (the account's name at `user add` or NEW); not part of any key.
    public var name: String
    public let box: BoxKeyPair
    public let signing: SigningKeyPair

    public init(name: String, box: BoxKeyPair, signing: SigningKeyPair) {
        self.name = name
        self.box = box
        self.signing = signing
    }

    /// Fresh key pairs from libsodium's random generator.
    public static func generate(name: String) throws(ApptimistCryptoError) -> ApptimistIdentity {
        ApptimistIdentity(name: name, box: try .generate(), signing: try .generate())
    }

    /// The seed's `ed25519(secAuthKey, pubEncrKey)`: what LOGIN carries, and (for the service)
    /// what the data nonce and header nonce prefix are cut from.
    public func signedBoxKey() throws(ApptimistCryptoError) -> [UInt8] {
        try Ed25519.sign(box.publicKey, secretKey: signing.secretKey)
    }

    /// Why an identity file could not be read or written.
    public struct FileError: Error, CustomStringConvertible, Hashable, Sendable {
        public let description: String
        public init(_ description: String) { self.description = description }
    }

    // MARK: JSON

    private struct Document: Codable {
        struct Pair: Codable {
            var `public`: String
            var secret: String?
            var seed: String?
        }
        var format: String
        var name: String
        var box: Pair
        var sign: Pair
    }

    public func json() throws -> Data {
        let document = Document(
            format: Self.format, name: name,
            box: .init(public: ApptimistHex.encode(box.publicKey), secret: ApptimistHex.encode(box.secretKey)),
            sign: .init(public: ApptimistHex.encode(signing.publicKey), seed: ApptimistHex.encode(signing.seed)))
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        return try encoder.encode(document) + Data("\n".utf8)
    }

    public init(json: Data) throws(FileError) {
        guard let document = try? JSONDecoder().decode(Document.self, from: json) else {
            throw FileError("not an Apptimist identity (JSON with format, name, box and sign)")
        }
        guard document.format == Self.format else { throw FileError("unknown identity format '\(document.format)' (expected \(Self.format))") }
        guard let boxSecret = document.box.secret.flatMap(ApptimistHex.decode), let seed = document.sign.seed.flatMap(ApptimistHex.decode) else {
            throw FileError("the identity has no box secret or signing seed in hex")
        }
        let box: BoxKeyPair
        let signing: SigningKeyPair
        do {
            box = try BoxKeyPair(secretKey: boxSecret)
            signing = try SigningKeyPair(seed: seed)
        } catch {
            throw FileError("the identity's keys are unusable: \(error)")
        }
        guard ApptimistHex.decode(document.box.public) == box.publicKey, ApptimistHex.decode(document.sign.public) == signing.publicKey else {
            throw FileError("the identity's public keys do not belong to its secret keys")
        }
        self.init(name: document.name, box: box, signing: signing)
    }

    // MARK: Files

    /// Writes a new identity file, mode 0600 from its creation; refuses to replace one unless
    /// `replacing` (a lost identity file is a lost account).
    public func write(to path: String, replacing: Bool = false) throws {
        let bytes = Array(try json())
        var flags = O_WRONLY | O_CREAT | O_TRUNC
        if !replacing { flags |= O_EXCL }
        let descriptor = open(path, flags, 0o600)
        guard descriptor >= 0 else {
            let reason = errno == EEXIST ? "it exists (keep it: it is the account's only key)" : String(cString: strerror(errno))
            throw FileError("cannot create identity file \(path): \(reason)")
        }
        defer { close(descriptor) }
        // An existing file kept its mode through O_TRUNC.
        guard fchmod(descriptor, 0o600) == 0 else { throw FileError("cannot make \(path) mode 0600: \(String(cString: strerror(errno)))") }
        var written = 0
        while written < bytes.count {
            let count = bytes[written...].withUnsafeBytes { Foundation.write(descriptor, $0.baseAddress, $0.count) }
            guard count > 0 else { throw FileError("cannot write identity file \(path): \(String(cString: strerror(errno)))") }
            written += count
        }
        guard fsync(descriptor) == 0 else { throw FileError("cannot sync identity file \(path): \(String(cString: strerror(errno)))") }
    }

    /// Reads an identity file; refuses one that others may read (as ssh does a private key).
    public init(file path: String) throws(FileError) {
        var status = stat()
        guard stat(path, &status) == 0 else { throw FileError("cannot read identity file \(path): \(String(cString: strerror(errno)))") }
        let mode = status.st_mode & 0o777
        guard mode & 0o077 == 0 else {
            throw FileError("identity file \(path) is mode \(String(mode, radix: 8)): others may read its secret keys; chmod 600 it")
        }
        guard let data = FileManager.default.contents(atPath: path) else { throw FileError("cannot read identity file \(path)") }
        do {
            try self.init(json: data)
        } catch {
            throw FileError("identity file \(path): \(error.description)")
        }
    }
}
