import ApptimistClient
import ApptimistProtocol
import Foundation
import JSONDiff
import SyncStore
import Testing

@Suite struct OutboxAndBytesViewTests {
    @Test func outboxRecipientsAreTheFirstLinesKeys() throws {
        let a = String(repeating: "ab", count: 32)
        let b = String(repeating: "CD", count: 32)
        let keys = try OutboxRecipients.parse(Array("To: \(a), \(b)\n\nhello\n".utf8)).get()
        #expect(keys.map(ApptimistHex.encode) == [a, b.lowercased()])
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
        // The service's access-control files: read-only among files that are not.
        let files = BytesFieldFormat(readOnlyKeys: ["author", "editors"])
        try store.setFileFormat(files, forBucket: "files")
        let kept = try #require(try SyncStore(path: path).fileFormat(ofBucket: "files") as? BytesFieldFormat)
        #expect(kept == files)
        #expect(kept.isReadOnly(key: "author") && !kept.isReadOnly(key: "notes.txt"))
    }
}
