import GRDB
import GRDBSQLite

extension Statement {
    /// Resets the statement and binds `values` to its parameters in order, each straight to
    /// SQLite (`sqlite3_bind_*`; texts and blobs copied). GRDB's `StatementArguments` box every
    /// value, convert it to a `DatabaseValue` and check the count on every run: ~4,000
    /// instructions for a statement of ten values and 10,000 for the entity's row, on the 37
    /// statements of a save (issue 40), and ~40K of a server's commit. SQLite copies a bound
    /// text or blob (`SQLITE_TRANSIENT`): a statement that binds a large blob of bytes it holds
    /// in place (a file's content, a chunk) stays on GRDB's `execute(arguments:)`, which binds a
    /// few values without a copy.
    public func bind<each Value: StatementBinding>(_ values: repeat each Value) throws {
        // Resets and clears the bindings, and tells GRDB the statement's arguments are bound.
        setUncheckedArguments(StatementArguments())
        var index: CInt = 0
        for value in repeat each values {
            index += 1
            let code = value.bind(to: sqliteStatement, at: index)
            guard code == SQLITE_OK else {
                throw DatabaseError(resultCode: ResultCode(rawValue: code), message: "binding value \(index)", sql: sql)
            }
        }
        let parameters = sqlite3_bind_parameter_count(sqliteStatement)
        guard index == parameters else {
            throw DatabaseError(resultCode: .SQLITE_MISUSE, message: "\(index) values for \(parameters) parameters", sql: sql)
        }
    }

    /// Runs the statement with `values` bound (`bind`), then lets go of them: SQLite keeps its
    /// copy of a bound text or blob until the statement is bound again, and a cached statement
    /// that last wrote a note of 14 MiB held that copy for the mount's life (issue 37).
    public func execute<each Value: StatementBinding>(binding values: repeat each Value) throws {
        try bind(repeat each values)
        defer { sqlite3_clear_bindings(sqliteStatement) }
        try execute()
    }

    /// The statement with `values` bound (`bind`), for GRDB's fetching methods, which run it
    /// with what is bound when given no arguments.
    public func bound<each Value: StatementBinding>(_ values: repeat each Value) throws -> Statement {
        try bind(repeat each values)
        return self
    }
}
