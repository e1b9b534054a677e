import ApptimistClient
import ApptimistCrypto
import Foundation
import JSONDiff
import SyncStore
import Testing

@Suite struct IdentityAndOutboxTests {
    @Test func anIdentityFileRoundTripsAndOneOthersCanReadIsRefused() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("apptimist-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/me.identity"
        let identity = try ApptimistIdentity.generate()
        try identity.save(path: path)
        #expect(try ApptimistIdentity.load(path: path) == identity)
        // Never overwritten.
        #expect(throws: ApptimistIdentityFileError.self) { try ApptimistIdentity.generate().save(path: path) }
        chmod(path, 0o644)
        #expect(throws: ApptimistIdentityFileError.tooOpen(path, mode: 0o644)) { try ApptimistIdentity.load(path: path) }
    }

    @Test func anIdentityWhosePublicKeyDoesNotMatchIsRefused() throws {
        let identity = try ApptimistIdentity.generate()
        var text = String(decoding: try identity.fileContents(), as: UTF8.self)
        text = text.replacingOccurrences(of: Hex.string(identity.signing.publicKey), with: String(repeating: "0", count: 64))
        #expect(throws: ApptimistIdentityFileError.self) { try ApptimistIdentity(fileContents: Data(text.utf8)) }
    }

    @Test func outboxRecipientsAreTheFirstLinesKeys() throws {
        let a = String(repeating: "ab", count: 32)
        let b = String(repeating: "CD", count: 32)
        let keys = try OutboxRecipients.parse(Array("To: \(a), \(b)\n\nhello\n".utf8)).get()
        #expect(keys.map(Hex.string) == [a, b.lowercased()])
        #expect(throws: OutboxRecipients.Problem.self) { try OutboxRecipients.parse(Array("hello\n".utf8)).get() }
        #expect(throws: OutboxRecipients.Problem.self) { try OutboxRecipients.parse(Array("To: bob\n".utf8)).get() }
        #expect(throws: OutboxRecipients.Problem.self) { try OutboxRecipients.parse(Array("To:\n".utf8)).get() }
    }

    @Test func aBytesViewShowsTheBytesAndAReadOnlyOneKeepsThem() throws {
        let format = BytesFieldFormat()
        let bytes: [UInt8] = [0, 255, 10, 13, 0x80]
        let value = try format.parse(bytes, base: nil, replacingFile: false, at: 0).get()
        #expect(format.render(value) == bytes)
        #expect(throws: EntityFileFormatError.self) { try format.parse([], base: nil, replacingFile: false, at: 0).get() }
        let message = BytesFieldFormat(readOnly: true)
        #expect(try message.parse(bytes, base: value, replacingFile: true, at: 0).get() == value)
        #expect(throws: EntityFileFormatError.self) { try message.parse([1], base: value, replacingFile: true, at: 0).get() }
    }

    @Test func aStoreKeepsABytesView() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("apptimist-\(UUID().uuidString).sqlite").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        let store = try SyncStore(path: path)
        try store.setFileFormat(BytesFieldFormat(readOnly: true), forBucket: "messages")
        let reopened = try SyncStore(path: path)
        let format = try #require(try reopened.fileFormat(ofBucket: "messages") as? BytesFieldFormat)
        #expect(format == BytesFieldFormat(readOnly: true))
        #expect(format.fileExtension == "")
    }
}
