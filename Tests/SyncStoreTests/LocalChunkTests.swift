import Foundation
import GRDB
import Testing
@testable import SyncStore

/// Large local files in chunks (issue 13): staged a few chunks per transaction, committed in one,
/// renamed without copying, truncated without reading, and their chunks reclaimed once unused.
@Suite("local files in chunks", .timeLimit(.minutes(1)))
struct LocalChunkTests {
    static let chunk = SyncStore.localChunkSize

    /// Bytes with a counter in every chunk, a hole of zeros in chunk 1, and a partial last chunk.
    static func sample() -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: 3 * chunk + 1234)
        for index in bytes.indices where index / chunk != 1 { bytes[index] = UInt8(truncatingIfNeeded: index * 31 + index / chunk) }
        return bytes
    }

    static func stage(_ store: SyncStore, _ bytes: [UInt8]) throws -> LocalContent {
        try store.stageLocalContent(size: bytes.count) { offset, buffer in
            bytes.withUnsafeBytes { source in
                buffer.copyMemory(from: UnsafeRawBufferPointer(rebasing: source[offset..<(offset + buffer.count)]))
            }
        }
    }

    static func chunkCount(_ store: SyncStore) throws -> Int {
        try store.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM local_chunk") ?? -1 }
    }

    @Test func stagedContentIsCommittedRenamedReadByChunkAndReclaimed() throws {
        try withStore { store, _ in
            let bytes = Self.sample()
            let staged = try Self.stage(store, bytes)
            // The hole is not stored.
            #expect(try Self.chunkCount(store) == 3)
            #expect(try store.localFile(bucket: "notes", name: "big.tmp") == nil)
            let entry = try store.commitLocalContent(bucket: "notes", name: "big.tmp", content: staged, newID: 900)
            #expect(entry.id == 900 && entry.size == bytes.count)
            #expect(try store.entries(bucket: "notes").first?.size == bytes.count)
            #expect(try store.localFile(bucket: "notes", name: "big.tmp")?.content == bytes)
            #expect(try store.readChunk(of: staged, index: 1) == [UInt8](repeating: 0, count: Self.chunk))
            #expect(try store.readChunk(of: staged, index: 3) == Array(bytes[(3 * Self.chunk)...]))
            // A rename to another local name moves the row: the same chunks, nothing copied.
            _ = try store.rename(bucket: "notes", from: .localFile(name: "big.tmp"), to: .localFile(name: "moved.tmp"))
            #expect(try store.localFileContent(bucket: "notes", name: "moved.tmp") == .chunked(staged))
            // Replaced by a small save, the chunks become garbage and go.
            _ = try store.writeLocalFile(bucket: "notes", name: "moved.tmp", bytes: [1, 2, 3])
            #expect(try store.localFileContent(bucket: "notes", name: "moved.tmp") == .bytes([1, 2, 3]))
            #expect(store.hasUnusedChunks)
            try store.reclaimUnusedChunks()
            #expect(try Self.chunkCount(store) == 0)
            #expect(!store.hasUnusedChunks)
        }
    }

    @Test func truncationInTheStoreCutsChunksAndLeavesNoStaleBytesPastTheEnd() throws {
        try withStore { store, _ in
            let bytes = Self.sample()
            _ = try store.commitLocalContent(bucket: "notes", name: "f.tmp", content: try Self.stage(store, bytes))
            _ = try store.resizeLocalFile(bucket: "notes", name: "f.tmp", to: 2 * Self.chunk + 10)
            let grown = try store.resizeLocalFile(bucket: "notes", name: "f.tmp", to: 4 * Self.chunk)
            #expect(grown.size == 4 * Self.chunk)
            var expected = Array(bytes[..<(2 * Self.chunk + 10)])
            expected += [UInt8](repeating: 0, count: 4 * Self.chunk - expected.count)
            #expect(try store.localFile(bucket: "notes", name: "f.tmp")?.content == expected)
            // A small file grown past a chunk moves into chunks.
            _ = try store.writeLocalFile(bucket: "notes", name: "s.tmp", bytes: [7, 8, 9])
            _ = try store.resizeLocalFile(bucket: "notes", name: "s.tmp", to: Self.chunk + 1)
            guard case .chunked(let content)? = try store.localFileContent(bucket: "notes", name: "s.tmp") else {
                Issue.record("s.tmp is not chunked")
                return
            }
            #expect(try store.readChunk(of: content, index: 0).prefix(4) == [7, 8, 9, 0])
            #expect(try store.readChunk(of: content, index: 1) == [0])
        }
    }

    /// `truncate -s` of a large closed file does the smaller part's work in its transaction: a
    /// cut to a chunk or less keeps the bytes in the row, a cut that drops more than it keeps
    /// copies what stays; either way the old chunks go to the reclaimer, and nothing past the
    /// new end shows again when the file grows.
    @Test func aLargeCutLeavesTheDroppedChunksToTheReclaimer() throws {
        try withStore { store, _ in
            var bytes = [UInt8](repeating: 0, count: 12 * Self.chunk + 99)
            for index in bytes.indices { bytes[index] = UInt8(truncatingIfNeeded: index * 7 + index / Self.chunk) }
            func contentID() throws -> Int64? {
                try store.read { db in try Int64.fetchOne(db, sql: "SELECT content_id FROM local_file WHERE name = 'f.tmp'") }
            }
            func garbage() throws -> [Int64] {
                try store.read { db in try Int64.fetchAll(db, sql: "SELECT content_id FROM local_garbage") }
            }
            _ = try store.commitLocalContent(bucket: "notes", name: "f.tmp", content: try Self.stage(store, bytes))
            let original = try #require(try contentID())

            // Drops one chunk, keeps twelve: cut in place.
            _ = try store.resizeLocalFile(bucket: "notes", name: "f.tmp", to: 11 * Self.chunk + 5)
            #expect(try contentID() == original)
            #expect(try garbage().isEmpty)
            #expect(try store.localFile(bucket: "notes", name: "f.tmp")?.content == Array(bytes[..<(11 * Self.chunk + 5)]))

            // Keeps two, drops ten: what stays is copied, the rest is garbage, still unread.
            _ = try store.resizeLocalFile(bucket: "notes", name: "f.tmp", to: Self.chunk + 5)
            let copy = try #require(try contentID())
            #expect(copy != original)
            #expect(try garbage() == [original])
            #expect(try Self.chunkCount(store) == 12 + 2)
            var expected = Array(bytes[..<(Self.chunk + 5)])
            #expect(try store.localFile(bucket: "notes", name: "f.tmp")?.content == expected)
            // Grown again: zeros past the cut, not the old bytes.
            _ = try store.resizeLocalFile(bucket: "notes", name: "f.tmp", to: 3 * Self.chunk)
            expected += [UInt8](repeating: 0, count: 3 * Self.chunk - expected.count)
            #expect(try store.localFile(bucket: "notes", name: "f.tmp")?.content == expected)

            // To a chunk or less: the bytes move into the row, grown and cut as a small file's.
            _ = try store.resizeLocalFile(bucket: "notes", name: "f.tmp", to: 10)
            #expect(try contentID() == nil)
            #expect(try Set(garbage()) == [original, copy])
            #expect(try store.localFileContent(bucket: "notes", name: "f.tmp") == .bytes(Array(bytes[..<10])))
            _ = try store.resizeLocalFile(bucket: "notes", name: "f.tmp", to: 0)
            #expect(try store.localFileContent(bucket: "notes", name: "f.tmp") == .bytes([]))

            try store.reclaimUnusedChunks()
            #expect(try Self.chunkCount(store) == 0)
            #expect(try garbage().isEmpty)
            // Freed pages are not zeroed through the WAL (Debian's SQLite would, by default).
            #expect(try store.read { db in try Int.fetchOne(db, sql: "PRAGMA secure_delete") } == 2)
        }
    }

    @Test func aStagedSaveThatACrashInterruptedIsReclaimedAtTheNextMount() throws {
        try withStore { store, _ in
            let kept = try Self.stage(store, Self.sample())
            _ = try store.commitLocalContent(bucket: "notes", name: "kept.tmp", content: kept)
            _ = try Self.stage(store, Self.sample())  // never committed
            #expect(try Self.chunkCount(store) == 6)
            try store.reclaimOrphanedChunks()
            #expect(try Self.chunkCount(store) == 3)
            #expect(try store.localFile(bucket: "notes", name: "kept.tmp")?.content == Self.sample())
        }
    }

    @Test func aScratchFilePastTheEntityLimitIsNotRenamedOntoAnEntity() throws {
        try withStore { store, _ in
            let size = SyncStore.entityFileLimit + 1
            let staged = try store.stageLocalContent(size: size) { _, buffer in
                buffer.initializeMemory(as: UInt8.self, repeating: 0x20)
            }
            _ = try store.commitLocalContent(bucket: "notes", name: "big.tmp", content: staged)
            #expect(throws: StoreError.self) {
                try store.rename(bucket: "notes", from: .localFile(name: "big.tmp"), to: .entity(key: "big"))
            }
            #expect(try store.localFileContent(bucket: "notes", name: "big.tmp") == .chunked(staged))
        }
    }
}
