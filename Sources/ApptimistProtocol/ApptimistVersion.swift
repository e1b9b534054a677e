/// The protocol versions, their nonce layouts and how a connection picks one
/// (Docs/apptimist-protocol.md).
public enum ApptimistVersion: UInt8, CaseIterable, Comparable, Hashable, Sendable {
    /// The seed's protocol, exactly as written: a fixed data nonce, a u16 header sequence.
    case v1 = 1
    /// A random data nonce carried with each data part and a u64 header sequence.
    case v2 = 2

    public static func < (lhs: Self, rhs: Self) -> Bool { lhs.rawValue < rhs.rawValue }

    /// The WebSocket subprotocol (Sec-WebSocket-Protocol) naming this version.
    public var subprotocol: String { "apptimist.v\(rawValue)" }

    /// The most PDUs one side may send on one connection before its header nonce would repeat.
    public var maxSequence: UInt64 {
        switch self {
        case .v1: return UInt64(UInt16.max)
        case .v2: return UInt64.max
        }
    }

    /// What our client offers, most preferred first.
    public static let offered: [String] = allCases.sorted(by: >).map(\.subprotocol)

    /// The server's choice from the client's Sec-WebSocket-Protocol values: the highest version
    /// offered. A client that offers no Apptimist subprotocol is a seed client: version 1, and
    /// the server answers with no subprotocol (as a seed server does).
    public static func serverChoice(offered: [String]) -> ApptimistVersion {
        let known = Set(offered.map { $0.trimmingSpaces() })
        return allCases.sorted(by: >).first { known.contains($0.subprotocol) } ?? .v1
    }

    /// The client's reading of the server's answer: none is a seed server (version 1); a
    /// subprotocol we did not offer is nil (the client closes the connection).
    public static func clientReading(accepted: String?) -> ApptimistVersion? {
        guard let accepted = accepted?.trimmingSpaces(), !accepted.isEmpty else { return .v1 }
        return allCases.first { $0.subprotocol == accepted }
    }

    /// The header nonce of the PDU with sequence number `seq`: the first bytes of the seed's
    /// `dataNonce` (the service's signature of its public encryption key), then `seq` big-endian
    /// (v1: 22 bytes and a u16, as the seed; v2: 16 bytes and a u64).
    public func headerNonce(prefix: [UInt8], seq: UInt64) throws(ApptimistProtocolError) -> [UInt8] {
        let prefixLength = self == .v1 ? 22 : 16
        guard prefix.count >= prefixLength else {
            throw .wrongFieldLength(field: "headerNoncePrefix", expected: prefixLength, actual: prefix.count)
        }
        guard seq <= maxSequence else { throw .sequenceExhausted }
        var writer = ByteWriter()
        writer.raw(Array(prefix.prefix(prefixLength)))
        switch self {
        case .v1: writer.unsigned(UInt16(seq))
        case .v2: writer.unsigned(seq)
        }
        return writer.bytes
    }
}

extension String {
    fileprivate func trimmingSpaces() -> String {
        String(drop { $0 == " " }.reversed().drop { $0 == " " }.reversed())
    }
}

/// One connection's header sequence numbers, per the seed: the side whose public key sorts first
/// sends 1, 3, 5, ...; the other 2, 4, 6, ... A sequence that would pass the version's maximum
/// throws `sequenceExhausted` (the caller closes and reopens, never reuses a nonce).
public struct HeaderSequence: Hashable, Sendable {
    public let version: ApptimistVersion
    /// The number of the next PDU this side sends, and of the next it expects.
    public private(set) var nextOutgoing: UInt64
    public private(set) var nextIncoming: UInt64
    /// The highest number this side sends: the version's maximum, or less where a side chooses
    /// to reopen sooner (tests drive a reopen with a small one).
    public let outgoingLimit: UInt64

    public init(version: ApptimistVersion, ownPublicKey: [UInt8], peerPublicKey: [UInt8], outgoingLimit: UInt64? = nil) {
        self.version = version
        self.outgoingLimit = min(outgoingLimit ?? version.maxSequence, version.maxSequence)
        let ownFirst = !peerPublicKey.lexicographicallyPrecedes(ownPublicKey)
        nextOutgoing = ownFirst ? 1 : 2
        nextIncoming = ownFirst ? 2 : 1
    }

    public mutating func takeOutgoing() throws(ApptimistProtocolError) -> UInt64 {
        try Self.take(&nextOutgoing, maximum: outgoingLimit)
    }

    public mutating func takeIncoming() throws(ApptimistProtocolError) -> UInt64 {
        try Self.take(&nextIncoming, maximum: version.maxSequence)
    }

    private static func take(_ next: inout UInt64, maximum: UInt64) throws(ApptimistProtocolError) -> UInt64 {
        // 0 marks a sequence that went past UInt64.max (only v2 can get there).
        guard next != 0, next <= maximum else { throw .sequenceExhausted }
        let seq = next
        let (following, overflow) = next.addingReportingOverflow(2)
        next = overflow ? 0 : following
        return seq
    }
}
