import GRDB
import GRDBSQLite

/// A large blob written and read a piece at a time (SQLite's incremental blob I/O), not as one
/// value: SQLite builds a row's record whole, so a statement that wrote or read a note of 14 MiB
/// held it in SQLite's memory besides the caller's copy (issue 37). Opening a blob prepares a
/// statement of its own, which costs more than a small value's copy: for large blobs only.
enum IncrementalBlob {
    /// Blobs of this many bytes and more go by pieces.
    static let threshold = 1 << 20
    static let pieceSize = 256 << 10

    /// Writes `bytes` over the blob of `column` in row `row` of `table`, which holds as many
    /// bytes already (a `zeroblob` of that length).
    static func write(_ bytes: [UInt8], table: String, column: String, row: Int64, _ db: Database) throws {
        try withBlob(table: table, column: column, row: row, writable: true, db) { blob in
            try bytes.withUnsafeBytes { buffer in
                var offset = 0
                while offset < buffer.count, let base = buffer.baseAddress {
                    let count = min(pieceSize, buffer.count - offset)
                    try check(sqlite3_blob_write(blob, base + offset, Int32(count), Int32(offset)), db)
                    offset += count
                }
            }
        }
    }

    /// The blob of `column` in row `row` of `table`, `count` bytes long, copied from SQLite's
    /// pages straight into the array.
    static func read(table: String, column: String, row: Int64, count: Int, _ db: Database) throws -> [UInt8] {
        try withBlob(table: table, column: column, row: row, writable: false, db) { blob in
            guard Int(sqlite3_blob_bytes(blob)) == count else {
                throw DatabaseError(resultCode: .SQLITE_CORRUPT, message: "\(table).\(column) of row \(row) is not \(count) bytes")
            }
            var failure: (any Error)?
            let bytes = [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
                var offset = 0
                while offset < count, let base = buffer.baseAddress {
                    let piece = min(pieceSize, count - offset)
                    do { try check(sqlite3_blob_read(blob, base + offset, Int32(piece), Int32(offset)), db) } catch {
                        failure = error
                        break
                    }
                    offset += piece
                }
                initialized = failure == nil ? count : 0
            }
            if let failure { throw failure }
            return bytes
        }
    }

    private static func withBlob<T>(
        table: String, column: String, row: Int64, writable: Bool, _ db: Database, _ body: (OpaquePointer) throws -> T
    ) throws -> T {
        // A store closed meanwhile has no connection left (GRDB's statements fail then too).
        guard let connection = db.sqliteConnection else {
            throw DatabaseError(resultCode: .SQLITE_MISUSE, message: "the database connection is closed")
        }
        var blob: OpaquePointer?
        let opened = sqlite3_blob_open(connection, "main", table, column, row, writable ? 1 : 0, &blob)
        defer { sqlite3_blob_close(blob) }
        try check(opened, db)
        guard let blob else { throw DatabaseError(resultCode: .SQLITE_ERROR, message: "no blob handle for \(table).\(column)") }
        return try body(blob)
    }

    private static func check(_ code: Int32, _ db: Database) throws {
        guard code != SQLITE_OK else { return }
        throw DatabaseError(
            resultCode: ResultCode(rawValue: code), message: String(cString: sqlite3_errmsg(db.sqliteConnection)))
    }
}
