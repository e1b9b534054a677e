import Foundation
import GRDB
import Glibc
import SQLiteStatements

/// The bytes of a local file kept in chunks (`local_chunk`): which chunks, and how long.
public struct LocalContent: Hashable, Sendable {
    public let id: Int64
    public let size: Int

    public init(id: Int64, size: Int) {
        self.id = id
        self.size = size
    }
}

/// Where a local file's bytes are: in its row (small files), or in chunks read a range at a time.
public enum LocalFileContent: Hashable, Sendable {
    case bytes([UInt8])
    case chunked(LocalContent)
}

/// Large local files: their bytes are written as chunks in short transactions (other saves go on
/// between them), then made the file's bytes in one small transaction; the chunks they replace
/// are removed a few at a time afterwards. Nothing holds a whole file in memory.
extension SyncStore {
    /// Bytes per chunk; a local file larger than this is kept in chunks.
    public static let localChunkSize = 1 << 20
    /// The largest file an entity may have. The server takes documents up to 4 MiB; an entity's
    /// bytes are parsed and kept whole (with its ghost and local value), so they are bounded.
    public static let entityFileLimit = 16 << 20
    /// Chunks written per transaction while staging: each holds the writer for a few ms only.
    static let chunksPerTransaction = 4

    /// A local file's bytes, or where its chunks are; nil if there is no such file.
    public func localFileContent(bucket: String, name: String) throws(StoreError) -> LocalFileContent? {
        try read { db in
            let bucketRow = try BucketRow.named(bucket, db)
            guard let row = try LocalFileRow.find(bucketID: bucketRow.id, name: name, db) else { return nil }
            if let id = row.contentID { return .chunked(LocalContent(id: id, size: row.byteCount)) }
            return .bytes([UInt8](row.content))
        }
    }

    /// Chunk `index` of `content`, `localChunkSize` bytes (fewer only at the end; a hole reads as
    /// zeros). Empty past the end.
    public func readChunk(of content: LocalContent, index: Int) throws(StoreError) -> [UInt8] {
        let start = index * Self.localChunkSize
        guard index >= 0, start < content.size else { return [] }
        let length = min(Self.localChunkSize, content.size - start)
        return try read { db in
            let statement = try db.cachedStatement(sql: "SELECT data FROM local_chunk WHERE content_id = ? AND seq = ?")
            var bytes = [UInt8](repeating: 0, count: length)
            if let data = try Data.fetchOne(statement, arguments: [content.id, index]) {
                bytes.withUnsafeMutableBytes { target in _ = data.copyBytes(to: target, count: min(data.count, length)) }
            }
            return bytes
        }
    }

    /// The whole of `content` in memory (for what is bounded anyway: an entity's file, tests).
    static func assemble(_ content: LocalContent, _ db: Database) throws -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: content.size)
        let rows = try Row.fetchCursor(
            db, sql: "SELECT seq, data FROM local_chunk WHERE content_id = ? ORDER BY seq", arguments: [content.id])
        while let row = try rows.next() {
            let start = (row[0] as Int) * localChunkSize
            let data = row[1] as Data
            guard start < content.size else { break }
            let count = min(data.count, content.size - start)
            bytes.withUnsafeMutableBytes { target in
                _ = data.copyBytes(to: UnsafeMutableRawBufferPointer(rebasing: target[start..<(start + count)]), count: count)
            }
        }
        return bytes
    }

    /// Writes `size` bytes as the chunks of a new content, `chunksPerTransaction` per
    /// transaction (`.deferred`), so saves of other files go on meanwhile. `fill(offset, buffer)`
    /// puts the bytes at `offset` into `buffer` (all of it: fewer bytes only at the end). Chunks
    /// of zeros are not stored. Nothing shows the content until `commitLocalContent`; one never
    /// committed goes with `discardLocalContent`, or at the next `reclaimOrphanedChunks`.
    public func stageLocalContent(
        size: Int, fill: (Int, UnsafeMutableRawBufferPointer) throws -> Void
    ) throws(StoreError) -> LocalContent {
        mayHaveChunks.withLock { $0 = true }
        let content = LocalContent(id: try write(.deferred) { db in try Schema.allocateNodeID(db) }, size: size)
        let chunk = Self.localChunkSize
        let count = (size + chunk - 1) / chunk
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: chunk, alignment: 16)
        let zeros = UnsafeMutableRawBufferPointer.allocate(byteCount: chunk, alignment: 16)
        defer {
            buffer.deallocate()
            zeros.deallocate()
        }
        zeros.initializeMemory(as: UInt8.self, repeating: 0)
        guard let zeroBytes = zeros.baseAddress else { throw StoreError.database("no memory for staging") }
        var index = 0
        do throws(StoreError) {
            while index < count {
                try write(.deferred) { db in
                    let insert = try db.cachedStatement(sql: "INSERT INTO local_chunk (content_id, seq, data) VALUES (?, ?, ?)")
                    for _ in 0..<Self.chunksPerTransaction where index < count {
                        let offset = index * chunk
                        let length = min(chunk, size - offset)
                        let part = UnsafeMutableRawBufferPointer(rebasing: buffer[0..<length])
                        try fill(offset, part)
                        if let base = part.baseAddress, memcmp(base, zeroBytes, length) != 0 {
                            // Bound without a copy into Swift memory (SQLite copies what it binds).
                            let data = Data(bytesNoCopy: base, count: length, deallocator: .none)
                            try insert.execute(arguments: [content.id, index, data])
                        }
                        index += 1
                    }
                }
            }
        } catch {
            try? discardLocalContent(content)
            throw error
        }
        return content
    }

    /// Makes staged `content` the bytes of the local file `name` (created with `newID` if it
    /// does not exist), in one small transaction; the chunks it had go to `reclaimUnusedChunks`.
    public func commitLocalContent(
        bucket: String, name: String, content: LocalContent, newID: Int64? = nil, durability: Durability = .synced
    ) throws(StoreError) -> DirectoryEntry {
        try write(durability) { db in
            let bucketRow = try BucketRow.named(bucket, db)
            let now = Self.now()
            let row = try Self.putLocalFile(
                bucketID: bucketRow.id, name: name, content: Data(), mtime: now, now: now, newID: newID, db)
            try db.cachedStatement(sql: "UPDATE local_file SET content_id = ?, size = ? WHERE id = ?")
                .execute(binding: content.id, content.size, row.id)
            guard let stored = try LocalFileRow.find(bucketID: bucketRow.id, name: name, db) else {
                throw StoreError.unknownLocalFile(bucket: bucket, name: name)
            }
            return stored.directoryEntry
        }
    }

    /// Staged content that will not be committed: its chunks go.
    public func discardLocalContent(_ content: LocalContent) throws(StoreError) {
        try write(.deferred) { db in
            try db.execute(sql: "INSERT OR IGNORE INTO local_garbage (content_id) VALUES (?)", arguments: [content.id])
        }
    }

    /// Whether chunks wait to be removed (a cheap check before `reclaimUnusedChunks`).
    public var hasUnusedChunks: Bool {
        guard mayHaveChunks.withLock({ $0 }) else { return false }
        return (try? read { db in try Bool.fetchOne(db, sql: "SELECT EXISTS (SELECT 1 FROM local_garbage)") ?? false }) ?? false
    }

    /// How many chunks one reclaiming transaction removes. Freeing a chunk reads each of its
    /// overflow pages (256 per MiB) to follow the chain: one MiB per transaction keeps a create
    /// or save that waits for the store's writer waiting milliseconds, never a removed gigabyte.
    static let chunksPerReclaim = 1

    /// Removes the chunks no file refers to any more, `chunksPerReclaim` per transaction, so a
    /// removed gigabyte never holds the store for long.
    public func reclaimUnusedChunks() throws(StoreError) {
        while try write(.deferred, { db -> Bool in
            guard let id = try Int64.fetchOne(db, sql: "SELECT content_id FROM local_garbage LIMIT 1") else { return false }
            try db.execute(
                sql: "DELETE FROM local_chunk WHERE id IN (SELECT id FROM local_chunk WHERE content_id = ? LIMIT ?)",
                arguments: [id, Self.chunksPerReclaim])
            if db.changesCount == 0 {
                try db.execute(sql: "DELETE FROM local_garbage WHERE content_id = ?", arguments: [id])
            }
            return true
        }) {}
    }

    /// At mount, before anything is staged: chunks of a save a crash interrupted (staged, never
    /// committed) are removed.
    public func reclaimOrphanedChunks() throws(StoreError) {
        try write(.deferred) { db in
            if try Bool.fetchOne(db, sql: "SELECT EXISTS (SELECT 1 FROM local_chunk)") == true {
                mayHaveChunks.withLock { $0 = true }
            }
            try db.execute(
                sql: """
                    INSERT OR IGNORE INTO local_garbage (content_id)
                    SELECT DISTINCT content_id FROM local_chunk
                    WHERE content_id NOT IN (SELECT content_id FROM local_file WHERE content_id IS NOT NULL)
                    """)
        }
        try reclaimUnusedChunks()
    }

    /// truncate(2) of a closed local file, without reading its bytes: chunks past the end go,
    /// a longer file reads zeros (a hole) past its old end.
    public func resizeLocalFile(
        bucket: String, name: String, to size: Int, durability: Durability = .synced
    ) throws(StoreError) -> DirectoryEntry {
        try write(durability) { db in
            let bucketRow = try BucketRow.named(bucket, db)
            guard var row = try LocalFileRow.find(bucketID: bucketRow.id, name: name, db) else {
                throw StoreError.unknownLocalFile(bucket: bucket, name: name)
            }
            let chunk = Self.localChunkSize
            let now = Self.now()
            if row.contentID == nil && size > chunk {
                mayHaveChunks.withLock { $0 = true }
                // Its bytes move into chunks of a content of its own.
                let id = try Schema.allocateNodeID(db)
                let insert = try db.cachedStatement(sql: "INSERT INTO local_chunk (content_id, seq, data) VALUES (?, ?, ?)")
                var offset = 0
                while offset < min(row.content.count, size) {
                    let end = min(offset + chunk, row.content.count, size)
                    try insert.execute(arguments: [id, offset / chunk, row.content[offset..<end]])
                    offset = end
                }
                row.content = Data()
                row.contentID = id
            }
            // Chunks 0..<kept hold the bytes below the new end.
            let kept = (size + chunk - 1) / chunk
            if let id = row.contentID, size <= chunk {
                // What is left fits in the row: the chunks go to the reclaimer whole (the
                // trigger), so `truncate -s 0` of a GiB holds the store no longer than a save.
                let head = size == 0 ? Data() : try Data.fetchOne(
                    db, sql: "SELECT substr(data, 1, ?) FROM local_chunk WHERE content_id = ? AND seq = 0",
                    arguments: [size, id]) ?? Data()
                row.content = head + Data(count: size - head.count)
                row.contentID = nil
                row.size = nil
            } else if let id = row.contentID, try Self.chunkCount(of: id, from: kept, db) > max(kept, Self.chunksPerReclaim) {
                // More goes than stays: the chunks that stay are copied to a content of their
                // own and the old one goes to the reclaimer, so the work is the smaller part's
                // (deleting a chunk reads it: SQLite walks its overflow pages to free them).
                let copy = try Schema.allocateNodeID(db)
                try db.execute(
                    sql: "INSERT INTO local_chunk (content_id, seq, data) SELECT ?, seq, data FROM local_chunk WHERE content_id = ? AND seq < ?",
                    arguments: [copy, id, kept])
                try Self.trimLastChunk(of: copy, to: size, db)
                row.contentID = copy
                row.size = Int64(size)
            } else if let id = row.contentID {
                // What lay past the new end must not show again if the file grows later.
                try db.execute(
                    sql: "DELETE FROM local_chunk WHERE content_id = ? AND seq >= ?",
                    arguments: [id, kept])
                try Self.trimLastChunk(of: id, to: size, db)
                row.size = Int64(size)
            } else if size < row.content.count {
                row.content = row.content.prefix(size)
            } else {
                row.content.append(Data(count: size - row.content.count))
            }
            row.mtime = now
            row.ctime = now
            try row.update(db)
            return row.directoryEntry
        }
    }

    /// How many chunks of content `id` lie at or past chunk number `seq` (from the index on
    /// (content_id, seq): no chunk is read).
    static func chunkCount(of id: Int64, from seq: Int, _ db: Database) throws -> Int {
        try Int.fetchOne(
            db.cachedStatement(sql: "SELECT count(*) FROM local_chunk WHERE content_id = ? AND seq >= ?"),
            arguments: [id, seq]) ?? 0
    }

    /// Cuts the chunk that holds byte `size - 1` of content `id` at the content's new end.
    static func trimLastChunk(of id: Int64, to size: Int, _ db: Database) throws {
        let chunk = localChunkSize
        guard size % chunk != 0 else { return }
        try db.execute(
            sql: "UPDATE local_chunk SET data = substr(data, 1, ?) WHERE content_id = ? AND seq = ? AND length(data) > ?",
            arguments: [size % chunk, id, size / chunk, size % chunk])
    }
}
