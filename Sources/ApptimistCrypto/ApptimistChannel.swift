import ApptimistProtocol
import Synchronization

/// One side of one connection's PDU crypto, for client and server alike: headers sealed between
/// this side's box key and the peer's (the device's ephemeral key and the service's), each with
/// the nonce of its sequence number, so a header sent twice, dropped or reordered does not open;
/// data parts sealed with the version's data nonce (version 1: the service's fixed one; version
/// 2: random, carried in the frame). Each key pair's crypto_box key is computed once per channel
/// (the header pair's at the start, data pairs' at first use), not for every box.
public struct ApptimistChannel: Sendable {
    public let version: ApptimistVersion
    private let own: BoxKeyPair
    public let peerPublicKey: [UInt8]
    /// The seed's `dataNonce` (`ApptimistServiceKey.dataNonce`).
    private let serviceDataNonce: [UInt8]
    private var sequence: HeaderSequence
    /// The header pair's key; nil for a peer key libsodium refuses (every header then fails as before).
    private let headerKey: CryptoBox.SharedKey?
    /// The data pairs' keys, shared by copies of this channel.
    private let dataKeys = SharedKeys()
    /// How the headers this side seals are laid out (`ApptimistHeaderLayout`; version 1 only):
    /// the service answers a client in the layout it speaks.
    public var headerLayout: ApptimistHeaderLayout = .fieldLists

    /// `sequenceLimit`: the highest header sequence number this side sends before the
    /// connection must be reopened (default: the version's maximum).
    public init(
        version: ApptimistVersion, own: BoxKeyPair, peerPublicKey: [UInt8], serviceDataNonce: [UInt8], sequenceLimit: UInt64? = nil
    ) throws(ApptimistChannelError) {
        guard peerPublicKey.count == CryptoBox.keyLength else {
            throw .protocol(.wrongFieldLength(field: "peer public key", expected: CryptoBox.keyLength, actual: peerPublicKey.count))
        }
        guard serviceDataNonce.count == CryptoBox.nonceLength else {
            throw .protocol(.wrongFieldLength(field: "dataNonce", expected: CryptoBox.nonceLength, actual: serviceDataNonce.count))
        }
        self.version = version
        self.own = own
        self.peerPublicKey = peerPublicKey
        self.serviceDataNonce = serviceDataNonce
        sequence = HeaderSequence(version: version, ownPublicKey: own.publicKey, peerPublicKey: peerPublicKey, outgoingLimit: sequenceLimit)
        headerKey = try? CryptoBox.sharedKey(publicKey: peerPublicKey, secretKey: own.secretKey)
    }

    /// The sequence number the next received header must carry.
    public var nextIncoming: UInt64 { sequence.nextIncoming }

    /// A whole frame: `pdu` under this connection's version with the next outgoing sequence
    /// number, and `data` as sealed (`sealData`). Throws `sequenceExhausted` rather than wrap.
    public mutating func seal(_ pdu: ApptimistPDU, data: ApptimistSealedData = .none) throws(ApptimistChannelError) -> [UInt8] {
        do {
            let header = try ApptimistHeader(version: version, pdu: pdu, layout: headerLayout).render()
            let seq = try sequence.takeOutgoing()
            let nonce = try version.headerNonce(prefix: serviceDataNonce, seq: seq)
            guard let headerKey else { throw ApptimistCryptoError.weakPublicKey }
            let sealed = try CryptoBox.seal(header, nonce: nonce, shared: headerKey)
            return try ApptimistFrame(sealedHeader: sealed, dataNonce: data.nonce, sealedData: data.sealed).render(version: version)
        } catch let error as ApptimistProtocolError {
            throw .protocol(error)
        } catch let error as ApptimistCryptoError {
            throw .crypto(error)
        } catch {
            throw .protocol(.sequenceExhausted)
        }
    }

    /// A received frame: its header opened at the next incoming sequence number, and parsed.
    public mutating func open(_ bytes: [UInt8]) throws(ApptimistChannelError) -> ApptimistReceived {
        let frame: ApptimistFrame
        let seq: UInt64
        do {
            frame = try ApptimistFrame.parse(bytes, version: version)
            seq = try sequence.takeIncoming()
        } catch {
            throw .protocol(error)
        }
        let headerBytes: [UInt8]
        do {
            let nonce = try version.headerNonce(prefix: serviceDataNonce, seq: seq)
            guard let headerKey else { throw ApptimistCryptoError.boxRejected }
            headerBytes = try CryptoBox.open(frame.sealedHeader, nonce: nonce, shared: headerKey)
        } catch {
            throw .headerRejected(sequence: seq)
        }
        do {
            let header = try ApptimistHeader.parse(headerBytes, version: version)
            let data = ApptimistSealedData(nonce: frame.dataNonce, sealed: frame.sealedData)
            return ApptimistReceived(pdu: header.pdu, headerBytes: headerBytes, data: data, layout: header.layout)
        } catch {
            throw .protocol(error)
        }
    }

    /// `plain` sealed from `senderSecretKey` to `recipientPublicKey` (the seed's eData), with
    /// this version's data nonce.
    public func sealData(_ plain: [UInt8], to recipientPublicKey: [UInt8], from senderSecretKey: [UInt8]) throws(ApptimistCryptoError) -> ApptimistSealedData {
        let nonce = version == .v1 ? serviceDataNonce : try CryptoBox.randomNonce()
        let sealed = try CryptoBox.seal(plain, nonce: nonce, shared: dataKeys.key(publicKey: recipientPublicKey, secretKey: senderSecretKey))
        return ApptimistSealedData(nonce: version == .v1 ? nil : nonce, sealed: sealed)
    }

    /// A received data part opened (a box from `senderPublicKey` to `recipientSecretKey`).
    public func openData(_ data: ApptimistSealedData, from senderPublicKey: [UInt8], to recipientSecretKey: [UInt8]) throws(ApptimistCryptoError) -> [UInt8] {
        let nonce = data.nonce ?? serviceDataNonce
        let key: CryptoBox.SharedKey
        do throws(ApptimistCryptoError) {
            key = try dataKeys.key(publicKey: senderPublicKey, secretKey: recipientSecretKey)
        } catch {
            throw error == .weakPublicKey ? .boxRejected : error  // as crypto_box_open_easy refuses it
        }
        return try CryptoBox.open(data.sealed, nonce: nonce, shared: key)
    }
}

/// crypto_box keys by key pair, computed at first use: a connection seals and opens data between
/// a few pairs (the user's and the service's; a message's sender's and recipient's) over and over.
/// Bounded: past `limit` pairs it starts again empty.
final class SharedKeys: Sendable {
    private let keys = Mutex<[[UInt8]: CryptoBox.SharedKey]>([:])
    static let limit = 256

    func key(publicKey: [UInt8], secretKey: [UInt8]) throws(ApptimistCryptoError) -> CryptoBox.SharedKey {
        let pair = publicKey + secretKey
        if let known = keys.withLock({ $0[pair] }) { return known }
        let key = try CryptoBox.sharedKey(publicKey: publicKey, secretKey: secretKey)
        keys.withLock { keys in
            if keys.count >= Self.limit { keys.removeAll() }
            keys[pair] = key
        }
        return key
    }
}

/// A PDU's data part as it travels: sealed bytes and, in version 2, their nonce.
public struct ApptimistSealedData: Hashable, Sendable {
    public var nonce: [UInt8]?
    public var sealed: [UInt8]

    public init(nonce: [UInt8]?, sealed: [UInt8]) {
        self.nonce = nonce
        self.sealed = sealed
    }

    /// No data (`nonce` nil, nothing sealed).
    public static let none = ApptimistSealedData(nonce: nil, sealed: [])

    public var isEmpty: Bool { sealed.isEmpty }

    /// The frame's data part (version 2: the nonce, then the sealed bytes): what a message id hashes.
    public var wireBytes: [UInt8] { (nonce ?? []) + sealed }
}

/// A PDU as received: its header's fields, the opened header's bytes (a message id hashes
/// them), and its data part still sealed.
public struct ApptimistReceived: Hashable, Sendable {
    public var pdu: ApptimistPDU
    public var headerBytes: [UInt8]
    public var data: ApptimistSealedData
    /// The layout the header came in (`ApptimistHeaderLayout`).
    public var layout: ApptimistHeaderLayout = .fieldLists
}

/// Why a frame could not be sealed or opened on a connection. Every case ends the connection
/// except where the caller can tell the peer (a bad data box on WRITE is answered, not fatal).
public enum ApptimistChannelError: Error, Hashable, Sendable, CustomStringConvertible {
    case `protocol`(ApptimistProtocolError)
    case crypto(ApptimistCryptoError)
    /// The header does not open with the nonce of the sequence number it must carry: forged,
    /// corrupted, sealed for another key, or a replay of an earlier PDU.
    case headerRejected(sequence: UInt64)

    public var description: String {
        switch self {
        case .protocol(let error): return error.description
        case .crypto(let error): return error.description
        case .headerRejected(let seq): return "the header does not open as PDU \(seq) of the connection (forged, corrupted or replayed)"
        }
    }
}
