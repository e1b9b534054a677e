import ApptimistProtocol
import Foundation

/// What a client must know of a service before its first PDU: its public box key (the other
/// half of every header box) and its self-signature `ed25519(serviceSecAuthKey, servicePubEncrKey)`,
/// the seed's `dataNonce` (its first 24 bytes), of which the header nonce prefix is a part.
/// `bucketfs serve` publishes it as JSON at `GET /SERVICE` (a plain HTTP GET on the WebSocket's
/// path) and `bucketfs apptimist service-key` prints the same document:
///
///     {"service": "notes", "public_key": "<64 hex>", "auth_key": "<64 hex>",
///      "signature": "<128 hex>", "versions": ["apptimist.v2", "apptimist.v1"],
///      "server": "bucketfs 0.9.0 (commit 839ed00)"}
public struct ApptimistServiceKey: Hashable, Sendable {
    public var service: String
    public var publicKey: [UInt8]
    public var authKey: [UInt8]
    public var signature: [UInt8]
    /// The protocol versions the service speaks, as its document lists them (empty: the
    /// document does not say, as a seed service's would not). A client that pinned a document
    /// listing version 2 refuses version 1 from the first connection on: an attacker on the
    /// plain ws:// path cannot strip the offer even against a fresh store.
    public var versions: [ApptimistVersion]

    public init(service: String, identity: ApptimistIdentity, versions: [ApptimistVersion] = ApptimistVersion.allCases) throws(ApptimistCryptoError) {
        self.service = service
        publicKey = identity.box.publicKey
        authKey = identity.signing.publicKey
        signature = try identity.signedBoxKey()
        self.versions = versions.sorted(by: >)
    }

    /// The seed's fixed `dataNonce`: version 1's data nonce, and both versions' header nonce prefix.
    public var dataNonce: [UInt8] { Array(signature.prefix(CryptoBox.nonceLength)) }

    /// Throws unless `signature` is `authKey`'s signature of `publicKey`.
    public func verify() throws(ApptimistCryptoError) {
        try Ed25519.verify(signature, of: publicKey, publicKey: authKey)
    }

    /// The document; `server` (`bucketfs 0.9.0 (commit 839ed00)`, issue 41) says which build
    /// serves it, for bug reports: it is not signed and a client reads nothing from it.
    public func json(server: String? = nil) -> Data {
        var object: [String: Any] = [
            "service": service, "public_key": ApptimistHex.encode(publicKey), "auth_key": ApptimistHex.encode(authKey),
            "signature": ApptimistHex.encode(signature), "versions": versions.map(\.subprotocol),
        ]
        if let server { object["server"] = server }
        return (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data()
    }

    /// Reads the document and checks its signature.
    public init(json: Data) throws(ApptimistIdentity.FileError) {
        guard let object = (try? JSONSerialization.jsonObject(with: json)) as? [String: Any],
            let service = object["service"] as? String,
            let publicKey = (object["public_key"] as? String).flatMap(ApptimistHex.decode), publicKey.count == CryptoBox.keyLength,
            let authKey = (object["auth_key"] as? String).flatMap(ApptimistHex.decode), authKey.count == SigningKeyPair.publicKeyLength,
            let signature = (object["signature"] as? String).flatMap(ApptimistHex.decode), signature.count == Ed25519.signatureLength
        else { throw .init("not an Apptimist service key (service, public_key, auth_key, signature in hex)") }
        self.service = service
        self.publicKey = publicKey
        self.authKey = authKey
        self.signature = signature
        // Names this bucketfs does not know (a later version) are skipped, not refused.
        let listed = (object["versions"] as? [String] ?? []).compactMap { name in ApptimistVersion.allCases.first { $0.subprotocol == name } }
        versions = Set(listed).sorted(by: >)
        do {
            try verify()
        } catch {
            throw .init("the service key's signature does not verify")
        }
    }
}
