import ApptimistCrypto
import ApptimistProtocol
import Foundation
import Testing

/// The connection crypto both ends use (`ApptimistChannel`) and the identity file the mount and
/// `bucketfs apptimist keygen` share.
@Suite("Apptimist channel and identity")
struct ChannelAndIdentityTests {
    let service: ApptimistIdentity
    let serviceKey: ApptimistServiceKey
    let device: BoxKeyPair

    init() throws {
        service = try ApptimistIdentity.generate(name: "service")
        serviceKey = try ApptimistServiceKey(service: "notes", identity: service)
        device = try BoxKeyPair.generate()
    }

    func pair(_ version: ApptimistVersion) throws -> (client: ApptimistChannel, server: ApptimistChannel) {
        let client = try ApptimistChannel(version: version, own: device, peerPublicKey: service.box.publicKey, serviceDataNonce: serviceKey.dataNonce)
        let server = try ApptimistChannel(version: version, own: service.box, peerPublicKey: device.publicKey, serviceDataNonce: serviceKey.dataNonce)
        return (client, server)
    }

    @Test(arguments: ApptimistVersion.allCases)
    func headersAndDataCrossBothWays(version: ApptimistVersion) throws {
        var (client, server) = try pair(version)
        let user = try ApptimistIdentity.generate(name: "alice")
        let fields = ApptimistFileFields(publicKey: user.box.publicKey, filename: Array("notes.txt".utf8))
        for round in 0 ..< 3 {
            let data = try client.sealData(Array("round \(round)".utf8), to: service.box.publicKey, from: user.box.secretKey)
            #expect((data.nonce == nil) == (version == .v1))
            let received = try server.open(try client.seal(.write(fields), data: data))
            #expect(received.pdu == .write(fields))
            #expect(try server.openData(received.data, from: user.box.publicKey, to: service.box.secretKey) == Array("round \(round)".utf8))
            let answer = try client.open(try server.seal(.write(fields)))
            #expect(answer.pdu == .write(fields))
            #expect(answer.data.isEmpty)
        }
    }

    @Test(arguments: ApptimistVersion.allCases)
    func aReplayedFrameIsRefusedByItsSequence(version: ApptimistVersion) throws {
        var (client, server) = try pair(version)
        let frame = try client.seal(.pause)
        _ = try server.open(frame)
        let expected = server.nextIncoming
        #expect(throws: ApptimistChannelError.headerRejected(sequence: expected)) {
            _ = try server.open(frame)
        }
    }

    @Test func anIdentityFileIsWrittenMode0600AndReadBack() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("identity-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        let identity = try ApptimistIdentity.generate(name: "alice")
        try identity.write(to: path)
        let mode = try #require(try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int)
        #expect(mode == 0o600)
        #expect(try ApptimistIdentity(file: path) == identity)
        #expect(throws: ApptimistIdentity.FileError.self) { try identity.write(to: path) }
        try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: path)
        #expect(throws: ApptimistIdentity.FileError.self) { _ = try ApptimistIdentity(file: path) }
    }

    @Test func anIdentityWhosePublicKeyIsNotItsSecretsIsRefused() throws {
        let alice = try ApptimistIdentity.generate(name: "alice")
        let bob = try ApptimistIdentity.generate(name: "bob")
        var object = try #require(try JSONSerialization.jsonObject(with: alice.json()) as? [String: Any])
        var box = try #require(object["box"] as? [String: Any])
        box["public"] = ApptimistHex.encode(bob.box.publicKey)
        object["box"] = box
        #expect(throws: ApptimistIdentity.FileError.self) { _ = try ApptimistIdentity(json: try JSONSerialization.data(withJSONObject: object)) }
    }

    @Test func theServiceKeyDocumentVerifiesAndAForgedOneDoesNot() throws {
        let read = try ApptimistServiceKey(json: serviceKey.json())
        #expect(read == serviceKey)
        var forged = serviceKey
        forged.publicKey = device.publicKey
        #expect(throws: ApptimistIdentity.FileError.self) { _ = try ApptimistServiceKey(json: forged.json()) }
    }
}
