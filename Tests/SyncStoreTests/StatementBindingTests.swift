import Foundation
import GRDB
import GRDBSQLite
import SQLiteStatements
import Testing

/// `Statement.bind` and `execute(binding:)`, the stores' way of running their hot statements:
/// values land in their parameters in order, a wrong count is an error (not a NULL bound in
/// silence), and a run lets go of SQLite's copy of what it bound.
@Suite("statements bound straight to SQLite") struct StatementBindingTests {
    func withTable(_ body: (Database) throws -> Void) throws {
        let queue = try DatabaseQueue()
        try queue.write { db in
            try db.execute(sql: "CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT, size INTEGER, flag INTEGER, data BLOB)")
            try body(db)
        }
    }

    @Test func valuesLandInTheirParametersInOrder() throws {
        try withTable { db in
            let insert = try db.cachedStatement(sql: "INSERT INTO t (id, name, size, flag, data) VALUES (?, ?, ?, ?, ?)")
            let noSize: Int? = nil
            try insert.execute(binding: Int64(1), "café", noSize, true, Data([0, 1, 2]))
            try insert.execute(binding: Int64(2), "b", Optional(7), false, Data())
            let rows = try Row.fetchAll(db, sql: "SELECT id, name, size, flag, data FROM t ORDER BY id")
            #expect(rows.count == 2)
            #expect(rows[0]["name"] as String == "café")
            #expect((rows[0]["size"] as Int?) == nil)
            #expect(rows[0]["flag"] as Bool == true)
            #expect(rows[0]["data"] as Data == Data([0, 1, 2]))
            #expect((rows[1]["size"] as Int?) == 7)
            // Numbered parameters take the values by number.
            try db.cachedStatement(sql: "UPDATE t SET name = ?2 WHERE id = ?1").execute(binding: Int64(2), "renamed")
            let select = try db.cachedStatement(sql: "SELECT name FROM t WHERE id = ?")
            #expect(try String.fetchOne(select.bound(Int64(2))) == "renamed")
            #expect(try String.fetchOne(select.bound(Int64(1))) == "café")
        }
    }

    @Test func aWrongCountIsAnErrorAndWritesNothing() throws {
        try withTable { db in
            let insert = try db.cachedStatement(sql: "INSERT INTO t (id, name) VALUES (?, ?)")
            #expect(throws: DatabaseError.self) { try insert.execute(binding: Int64(1)) }
            #expect(throws: DatabaseError.self) { try insert.execute(binding: Int64(1), "a", "extra") }
            #expect(try Int.fetchOne(db, sql: "SELECT count(*) FROM t") == 0)
        }
    }

    @Test func aRunLetsGoOfWhatItBound() throws {
        try withTable { db in
            let insert = try db.cachedStatement(sql: "INSERT INTO t (id, data) VALUES (?, ?)")
            try insert.execute(binding: Int64(1), Data(repeating: 7, count: 1 << 20))
            // Nothing stays bound: SQLite reports no value for either parameter.
            let expanded = try #require(sqlite3_expanded_sql(insert.sqliteStatement))
            defer { sqlite3_free(expanded) }
            #expect(String(cString: expanded).hasSuffix("VALUES (NULL, NULL)"))
        }
    }
}
