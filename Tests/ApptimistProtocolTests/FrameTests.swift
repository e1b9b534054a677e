import ApptimistProtocol
import Testing

@Suite("Apptimist frames, versions and sequences")
struct FrameTests {
    static let header = [UInt8](repeating: 0x11, count: 20)
    static let data = [UInt8](repeating: 0x22, count: 30)
    static let nonce = [UInt8](repeating: 0x33, count: 24)

    @Test func version1FramesAreTheTwoLengthsThenTheParts() throws {
        let frame = ApptimistFrame(sealedHeader: Self.header, sealedData: Self.data)
        let bytes = try frame.render(version: .v1)
        #expect(bytes == [0, 0, 0, 20, 0, 0, 0, 30] + Self.header + Self.data)
        #expect(try ApptimistFrame.parse(bytes, version: .v1) == frame)
        let noData = ApptimistFrame(sealedHeader: Self.header)
        #expect(try ApptimistFrame.parse(noData.render(version: .v1), version: .v1) == noData)
    }

    @Test func version2CarriesTheDataNonceInsideTheDataPart() throws {
        let frame = ApptimistFrame(sealedHeader: Self.header, dataNonce: Self.nonce, sealedData: Self.data)
        let bytes = try frame.render(version: .v2)
        #expect(bytes == [0, 0, 0, 20, 0, 0, 0, 54] + Self.header + Self.nonce + Self.data)
        #expect(try ApptimistFrame.parse(bytes, version: .v2) == frame)
        let noData = ApptimistFrame(sealedHeader: Self.header)
        #expect(try noData.render(version: .v2) == [0, 0, 0, 20, 0, 0, 0, 0] + Self.header)
        #expect(try ApptimistFrame.parse(noData.render(version: .v2), version: .v2) == noData)
    }

    @Test func malformedFramesSayWhy() {
        let cases: [([UInt8], ApptimistVersion, ApptimistProtocolError)] = [
            ([], .v1, .truncatedFrame(length: 0)),
            ([0, 0, 0, 0, 0, 0, 0], .v1, .truncatedFrame(length: 7)),
            ([0, 0, 0, 21, 0, 0, 0, 0] + Self.header, .v1, .lengthExceedsFrame(field: "headerLen", length: 21, available: 20)),
            ([0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0], .v2, .lengthExceedsFrame(field: "headerLen", length: 0xFFFF_FFFF, available: 0)),
            ([0, 0, 0, 20, 0, 0, 0, 31] + Self.header + Self.data, .v1, .lengthExceedsFrame(field: "dataLen", length: 31, available: 30)),
            ([0, 0, 0, 20, 0, 0, 0, 29] + Self.header + Self.data, .v1, .trailingBytes(1)),
            ([0, 0, 0, 20, 0, 0, 0, 24] + Self.header + Self.nonce, .v2, .missingDataNonce(length: 24)),
            ([0, 0, 0, 20, 0, 0, 0, 5] + Self.header + [1, 2, 3, 4, 5], .v2, .missingDataNonce(length: 5)),
        ]
        for (bytes, version, error) in cases {
            #expect(throws: error) { try ApptimistFrame.parse(bytes, version: version) }
        }
    }

    @Test func aDataNonceGoesOnlyWithVersion2Data() {
        #expect(throws: ApptimistProtocolError.wrongFieldLength(field: "dataNonce", expected: 0, actual: 24)) {
            try ApptimistFrame(sealedHeader: Self.header, dataNonce: Self.nonce, sealedData: Self.data).render(version: .v1)
        }
        #expect(throws: ApptimistProtocolError.wrongFieldLength(field: "dataNonce", expected: 24, actual: 0)) {
            try ApptimistFrame(sealedHeader: Self.header, sealedData: Self.data).render(version: .v2)
        }
        #expect(throws: ApptimistProtocolError.wrongFieldLength(field: "dataNonce", expected: 0, actual: 24)) {
            try ApptimistFrame(sealedHeader: Self.header, dataNonce: Self.nonce).render(version: .v2)
        }
    }

    @Test func theServerPicksTheHighestOfferedAndASeedClientGetsVersion1() {
        #expect(ApptimistVersion.offered == ["apptimist.v2", "apptimist.v1"])
        #expect(ApptimistVersion.serverChoice(offered: ApptimistVersion.offered) == .v2)
        #expect(ApptimistVersion.serverChoice(offered: ["chat", " apptimist.v2 "]) == .v2)
        #expect(ApptimistVersion.serverChoice(offered: ["apptimist.v1"]) == .v1)
        #expect(ApptimistVersion.serverChoice(offered: []) == .v1)
        #expect(ApptimistVersion.serverChoice(offered: ["apptimist.v9"]) == .v1)
        #expect(ApptimistVersion.clientReading(accepted: nil) == .v1)
        #expect(ApptimistVersion.clientReading(accepted: "apptimist.v2") == .v2)
        #expect(ApptimistVersion.clientReading(accepted: "other") == nil)
    }

    @Test func headerNoncesFollowTheVersionsLayouts() throws {
        let prefix = Array(UInt8(0) ..< 64)
        #expect(try ApptimistVersion.v1.headerNonce(prefix: prefix, seq: 0x0102) == Array(0 ..< 22) + [1, 2])
        #expect(try ApptimistVersion.v2.headerNonce(prefix: prefix, seq: 0x0102) == Array(0 ..< 16) + [0, 0, 0, 0, 0, 0, 1, 2])
        #expect(throws: ApptimistProtocolError.sequenceExhausted) { try ApptimistVersion.v1.headerNonce(prefix: prefix, seq: 65536) }
        #expect(throws: ApptimistProtocolError.wrongFieldLength(field: "headerNoncePrefix", expected: 22, actual: 21)) {
            try ApptimistVersion.v1.headerNonce(prefix: Array(prefix.prefix(21)), seq: 1)
        }
    }

    @Test func theSmallerKeySendsOddSequencesAndTheOtherEven() throws {
        let small = [UInt8](repeating: 1, count: 32)
        let large = [UInt8](repeating: 2, count: 32)
        var first = HeaderSequence(version: .v2, ownPublicKey: small, peerPublicKey: large)
        var second = HeaderSequence(version: .v2, ownPublicKey: large, peerPublicKey: small)
        #expect(try [first.takeOutgoing(), first.takeOutgoing(), first.takeOutgoing()] == [1, 3, 5])
        #expect(try [second.takeOutgoing(), second.takeOutgoing()] == [2, 4])
        #expect(try [first.takeIncoming(), first.takeIncoming()] == [2, 4])
        #expect(try [second.takeIncoming(), second.takeIncoming(), second.takeIncoming()] == [1, 3, 5])
    }

    /// Version 1's u16 runs out after 32,767 PDUs a side: the connection must be reopened, never
    /// wrap (a wrapped sequence repeats a header nonce under the same key pair).
    @Test func version1RefusesToWrapItsSequence() throws {
        var sequence = HeaderSequence(version: .v1, ownPublicKey: [1], peerPublicKey: [2])
        var last: UInt64 = 0
        for _ in 0 ..< 32_768 { last = try sequence.takeOutgoing() }
        #expect(last == 65_535)
        #expect(throws: ApptimistProtocolError.sequenceExhausted) { try sequence.takeOutgoing() }
        #expect(throws: ApptimistProtocolError.sequenceExhausted) { try sequence.takeOutgoing() }
        var even = HeaderSequence(version: .v1, ownPublicKey: [2], peerPublicKey: [1])
        for _ in 0 ..< 32_767 { last = try even.takeOutgoing() }
        #expect(last == 65_534)
        #expect(throws: ApptimistProtocolError.sequenceExhausted) { try even.takeOutgoing() }
    }

    /// A side may choose to reopen sooner than its version must: a lower outgoing limit is kept
    /// (never a higher one), and the peer's numbers are checked against the version alone.
    @Test func aLowerOutgoingLimitEndsTheSequenceSooner() throws {
        var sequence = HeaderSequence(version: .v2, ownPublicKey: [1], peerPublicKey: [2], outgoingLimit: 5)
        #expect(try [sequence.takeOutgoing(), sequence.takeOutgoing(), sequence.takeOutgoing()] == [1, 3, 5])
        #expect(throws: ApptimistProtocolError.sequenceExhausted) { try sequence.takeOutgoing() }
        for _ in 0 ..< 10 { _ = try sequence.takeIncoming() }
        let capped = HeaderSequence(version: .v1, ownPublicKey: [1], peerPublicKey: [2], outgoingLimit: .max)
        #expect(capped.outgoingLimit == 65_535)
    }
}
