import Foundation
import GRDB
import Testing
@testable import SyncStore

/// The records read their columns by position: each must read back, field for field, what it
/// wrote by name (a column added to a table, or a field moved, fails here first).
@Suite("record column order")
struct RecordColumnOrderTests {
    @Test func everyRecordReadsBackWhatItWrote() throws {
        let directory = try TemporaryDirectory()
        defer { directory.cleanup() }
        let store = try SyncStore(path: directory.storePath)
        defer { try? store.close() }
        // Distinct values in every column, so a swapped pair cannot read back equal.
        let bucket = BucketRow(id: 900, name: "b", cv: "cv", indexCV: "icv", indexGeneration: 7, ctime: 11)
        let entity = EntityRow(
            id: 901, bucketID: 900, key: "k", ghostVersion: 3, ghostData: "{\"g\":1}", localValue: "{\"l\":2}",
            content: Data([1, 2]), mtime: 12, ctime: 13, state: "pending", reason: "why", deletedPending: true,
            reloadVersion: 4, needsReload: true, seenGeneration: 5, nodeID: 903, mode: 0o600, atime: 17, authored: true,
            editSeq: 19, acknowledgedEditSeq: 20, authoredCCID: "made-by", unparsed: true)
        var change = ChangeRow(
            entityID: 901, ccid: "c", sv: 6, op: "M", diff: "{\"d\":1}", fullData: "{\"f\":1}", state: "sent", created: 14, editSeq: 21)
        let file = LocalFileRow(id: 902, bucketID: 900, name: "n", content: Data([3]), mtime: 15, ctime: 16, mode: 0o640, atime: 18)
        try store.pool.write { db in
            try bucket.insert(db)
            try entity.insert(db)
            try change.insert(db)
            try file.insert(db)
        }
        try store.pool.read { db in
            let rows: [(written: any EncodableRecord, read: (any EncodableRecord)?)] = [
                (bucket, try BucketRow.fetchOne(db, sql: "SELECT * FROM bucket WHERE id = 900")),
                (entity, try EntityRow.fetchOne(db, sql: "SELECT * FROM entity")),
                (change, try ChangeRow.fetchOne(db, sql: "SELECT * FROM pending_change")),
                (file, try LocalFileRow.fetchOne(db, sql: "SELECT * FROM local_file")),
            ]
            for (written, read) in rows {
                let read = try #require(read)
                #expect(try read.databaseDictionary == written.databaseDictionary)
            }
            // The lookups each save makes read the columns straight from the statement.
            let lookedUp: [(written: any EncodableRecord, read: (any EncodableRecord)?)] = [
                (bucket, try BucketRow.named("b", db)),
                (entity, try EntityRow.find(bucketID: 900, key: "k", db)),
                (change, try ChangeRow.open(entityID: 901, db)),
            ]
            for (written, read) in lookedUp {
                let read = try #require(read)
                #expect(try read.databaseDictionary == written.databaseDictionary)
            }
            // The file's bytes are in a table of their own, read when asked for.
            #expect(try Data.fetchOne(db, sql: "SELECT bytes FROM entity_content WHERE entity_id = 901") == Data([1, 2]))
            #expect(try EntityRow.find(bucketID: 900, key: "k", db)?.content(db) == [1, 2])
            // The hand-written inserts put each value in its column, by name.
            for (table, written) in [("entity", entity as any EncodableRecord), ("pending_change", change)] {
                let row = try #require(try Row.fetchOne(db, sql: "SELECT * FROM \(table)"))
                let stored = Dictionary(uniqueKeysWithValues: row.columnNames.map { ($0, row[$0] as DatabaseValue) })
                #expect(stored == (try written.databaseDictionary))
            }
        }
    }
}
