import ApptimistClient
import ApptimistProtocol
import Foundation
import JSONDiff
import SyncEngine
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
        defer { removeStoreFiles(at: path) }
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

    /// Bytes are opaque: a remote change of a file whose save is owed here keeps the local
    /// bytes whole (state conflict, sent over the server's), never a jsondiff merge of base64
    /// text (which is no file either side wrote). A change only on one side is taken as it is.
    @Test func aRemoteChangeOverAnOwedSaveOfBytesKeepsTheLocalBytes() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("apptimist-\(UUID().uuidString).sqlite").path
        defer { removeStoreFiles(at: path) }
        let store = try SyncStore(path: path)
        let format = BytesFieldFormat()
        try store.setFileFormat(format, forBucket: "files")
        let mirror = CountedVersionMirror(store: store)
        try mirror.apply(state: format.value(of: Array("hello world\n".utf8)), key: "f", bucket: "files")
        _ = try store.saveLocal(bucket: "files", key: "f", bytes: Array("hello brave world\n".utf8))
        try mirror.apply(state: format.value(of: Array("hello wide world\n".utf8)), key: "f", bucket: "files")
        let entity = try #require(try store.entity(bucket: "files", key: "f"))
        #expect(entity.value.flatMap(format.bytes(of:)) == Array("hello brave world\n".utf8))
        #expect(entity.state == .conflict)
        #expect(try store.outgoingChanges(bucket: "files").map(\.key) == ["f"])
        // Nothing owed: the server's bytes are taken.
        try mirror.apply(state: format.value(of: Array("other\n".utf8)), key: "g", bucket: "files")
        try mirror.apply(state: format.value(of: Array("changed\n".utf8)), key: "g", bucket: "files")
        #expect(try store.entity(bucket: "files", key: "g")?.value.flatMap(format.bytes(of:)) == Array("changed\n".utf8))
    }
}

/// A store file with its WAL and shared-memory files (SQLite leaves them while a connection is
/// open, and a test's store is still open when its `defer` runs).
func removeStoreFiles(at path: String) {
    for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) }
}
