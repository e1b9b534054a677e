import ApptimistProtocol
import Testing

@Suite("Apptimist headers")
struct HeaderTests {
    static let key = [UInt8](repeating: 0xAA, count: 32)
    static let other = [UInt8](repeating: 0xBB, count: 32)
    static let signature = [UInt8](repeating: 0x5E, count: 64)
    static let file = ApptimistFileFields(publicKey: key, error: 7, filename: Array("notes.txt".utf8))

    static let everyType: [ApptimistPDU] = [
        .login(userPublicKey: key, signature: signature, max: 500, head: [UInt8](repeating: 1, count: 64)),
        .redirect(uri: Array("ws://alpha.siren.apptimist.co/siren".utf8)),
        .new(publicKey: key, authKey: other, name: Array("Ann".utf8), uid: Array("ann-1".utf8), token: [0, 1, 2]),
        .del(publicKey: key),
        .message(time: 1_764_000_000, recipient: key, to: other, from: key),
        .truncate(messageID: signature),
        .pause,
        .resume,
        .vouch(subject: other, signature: signature),
        .vouchers(subject: other, vouchers: [key, other]),
        .searchByName(maxUsers: 10, name: Array("An".utf8)),
        .searchByUID(maxUsers: 0, uid: Array("ann-1".utf8)),
        .searchByKey(publicKey: other),
        .user(count: 2, publicKey: key, name: Array("Ann".utf8), uid: []),
        .read(file), .lock(file), .write(file), .remove(file),
    ]

    @Test func everyTypeRoundTripsInBothVersions() throws {
        #expect(Set(Self.everyType.map(\.type)) == Set(ApptimistPDUType.allCases))
        for version in ApptimistVersion.allCases {
            for pdu in Self.everyType {
                let bytes = try ApptimistHeader(version: version, pdu: pdu).render()
                #expect(Array(bytes.prefix(2)) == [version.rawValue, pdu.type.rawValue])
                #expect(try ApptimistHeader.parse(bytes, version: version) == ApptimistHeader(version: version, pdu: pdu))
            }
        }
    }

    /// The seed's layouts, byte for byte (big-endian; lengths before their values).
    @Test func fieldsAreLaidOutAsTheSpecSays() throws {
        let login = try ApptimistHeader(version: .v1, pdu: Self.everyType[0]).render()
        #expect(login == [1, 1] + Self.key + Self.signature + [0x01, 0xF4] + [UInt8](repeating: 1, count: 64))
        let new = try ApptimistHeader(version: .v1, pdu: Self.everyType[2]).render()
        #expect(new == [1, 3] + Self.key + Self.other + [3, 5, 3] + Array("Annann-1".utf8) + [0, 1, 2])
        let read = try ApptimistHeader(version: .v2, pdu: .read(Self.file)).render()
        #expect(read == [2, 15] + Self.key + [0, 7, 9] + Array("notes.txt".utf8))
        let vouchers = try ApptimistHeader(version: .v1, pdu: Self.everyType[9]).render()
        #expect(vouchers == [1, 10] + Self.other + [0, 0, 0, 2] + Self.key + Self.other)
        let message = try ApptimistHeader(version: .v1, pdu: .message(time: 0x0102_0304_0506_0708, recipient: Self.key, to: Self.other, from: Self.key)).render()
        #expect(message == [1, 5, 1, 2, 3, 4, 5, 6, 7, 8] + Self.key + Self.other + Self.key)
        #expect(try ApptimistHeader(version: .v1, pdu: .redirect(uri: Array("ws://h/s".utf8))).render() == [1, 2, 0, 8] + Array("ws://h/s".utf8))
        #expect(try ApptimistHeader(version: .v1, pdu: .pause).render() == [1, 7])
    }

    @Test func malformedHeadersSayWhy() {
        let cases: [([UInt8], ApptimistProtocolError)] = [
            ([], .truncatedHeader(field: "version")),
            ([1], .truncatedHeader(field: "type")),
            ([3, 7], .unsupportedVersion(3)),
            ([0, 7], .unsupportedVersion(0)),
            ([2, 7], .versionMismatch(expected: 1, found: 2)),
            ([1, 0], .unknownType(0)),
            ([1, 19], .unknownType(19)),
            ([1, 255], .unknownType(255)),
            ([1, 7, 0], .trailingBytes(1)),
            ([1, 4] + [UInt8](repeating: 0, count: 31), .truncatedHeader(field: "pubEncrKey")),
            ([1, 15] + Self.key + [0, 0, 10] + Array("short".utf8), .truncatedHeader(field: "filename")),
            ([1, 2, 0xFF, 0xFF, 1], .truncatedHeader(field: "uri")),
            ([1, 10] + Self.key + [0xFF, 0xFF, 0xFF, 0xFF] + Self.key, .lengthExceedsFrame(field: "count", length: 0xFFFF_FFFF * 32, available: 32)),
            ([1, 3] + Self.key + Self.other + [1, 1], .truncatedHeader(field: "tokenLen")),
        ]
        for (bytes, error) in cases {
            #expect(throws: error) { try ApptimistHeader.parse(bytes, version: .v1) }
        }
    }

    @Test func fieldsThatDoNotFitAreRefusedOnRender() {
        let long = [UInt8](repeating: 0x61, count: 256)
        #expect(throws: ApptimistProtocolError.fieldTooLong(field: "filename", length: 256, maximum: 255)) {
            try ApptimistHeader(version: .v1, pdu: .write(ApptimistFileFields(publicKey: Self.key, filename: long))).render()
        }
        #expect(throws: ApptimistProtocolError.wrongFieldLength(field: "pubEncrKey", expected: 32, actual: 31)) {
            try ApptimistHeader(version: .v2, pdu: .del(publicKey: Array(Self.key.dropLast()))).render()
        }
        #expect(throws: ApptimistProtocolError.wrongFieldLength(field: "signature", expected: 64, actual: 0)) {
            try ApptimistHeader(version: .v1, pdu: .vouch(subject: Self.key, signature: [])).render()
        }
    }

    /// The seed's header lines leave out MESSAGE's `time` and the searches' `maxUsers`, which its
    /// field lists name; a version 1 header in either layout is read, and says which it was.
    @Test func version1ReadsTheSeedsHeaderLinesToo() throws {
        let literalMessage: [UInt8] = [1, 5] + Self.key + Self.other + Self.key
        let message = try ApptimistHeader.parse(literalMessage, version: .v1)
        #expect(message.layout == .headerLines)
        #expect(message.pdu == .message(time: 0, recipient: Self.key, to: Self.other, from: Self.key))
        #expect(try message.render() == literalMessage)
        let fieldLists = ApptimistHeader(version: .v1, pdu: .message(time: 7, recipient: Self.key, to: Self.other, from: Self.key))
        #expect(try fieldLists.render().count == 106)
        #expect(try ApptimistHeader.parse(try fieldLists.render(), version: .v1) == fieldLists)

        let search = try ApptimistHeader.parse([1, 11, 2] + Array("An".utf8), version: .v1)
        #expect(search == ApptimistHeader(version: .v1, pdu: .searchByName(maxUsers: 0, name: Array("An".utf8)), layout: .headerLines))
        #expect(try search.render() == [1, 11, 2] + Array("An".utf8))
        let byUID = try ApptimistHeader.parse([1, 12, 5] + Array("ann-1".utf8), version: .v1)
        #expect(byUID.pdu == .searchByUID(maxUsers: 0, uid: Array("ann-1".utf8)) && byUID.layout == .headerLines)

        // Bytes that read either way (a name whose second byte is its length less two) are the
        // field lists' (bucketfs's own clients send those).
        let either: [UInt8] = [1, 11, 5, 0x78, 3] + Array("abc".utf8)
        #expect(try ApptimistHeader.parse(either, version: .v1) == ApptimistHeader(version: .v1, pdu: .searchByName(maxUsers: 0x0578, name: Array("abc".utf8))))

        // Neither length: refused as before; version 2 has only the field lists.
        #expect(throws: ApptimistProtocolError.self) { try ApptimistHeader.parse([1, 5] + [UInt8](repeating: 0, count: 100), version: .v1) }
        #expect(throws: ApptimistProtocolError.self) { try ApptimistHeader.parse([2, 5] + Self.key + Self.other + Self.key, version: .v2) }
        #expect(ApptimistHeader(version: .v2, pdu: .pause, layout: .headerLines).layout == .fieldLists)
        // The other types have one layout: a short LOGIN is still short.
        #expect(throws: ApptimistProtocolError.self) { try ApptimistHeader.parse([1, 1] + Self.key, version: .v1) }
    }
}
