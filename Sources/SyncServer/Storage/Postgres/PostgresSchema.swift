import Logging
import PostgresNIO

/// The server schema on PostgreSQL as numbered migrations (never edit one once merged; add
/// another). The tables mirror `ServerSchema` (SQLite), with keys in byte order (`COLLATE "C"`,
/// as SQLite compares them) so index pages page the same way on both stores.
enum PostgresSchema {
    /// Serializes migrations of every node starting on the database at once.
    static let advisoryLockKey: Int64 = 0x6275_636B_6574_6673 // "bucketfs"

    static let migrations: [(version: Int, sql: [String])] = [
        (1, [
            """
            CREATE TABLE server_state (
                id INTEGER PRIMARY KEY CHECK (id = 1),
                last_cv BIGINT NOT NULL
            )
            """,
            "INSERT INTO server_state (id, last_cv) VALUES (1, 0)",
            """
            CREATE TABLE users (
                id BIGSERIAL PRIMARY KEY,
                username TEXT NOT NULL UNIQUE,
                public_id TEXT NOT NULL UNIQUE,
                password_hash BYTEA NOT NULL,
                password_salt BYTEA NOT NULL,
                password_iterations INTEGER NOT NULL,
                created_at DOUBLE PRECISION NOT NULL
            )
            """,
            """
            CREATE TABLE tokens (
                token_hash BYTEA PRIMARY KEY,
                user_id BIGINT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
                created_at DOUBLE PRECISION NOT NULL
            )
            """,
            "CREATE INDEX tokens_by_user ON tokens(user_id)",
            """
            CREATE TABLE buckets (
                id BIGSERIAL PRIMARY KEY,
                user_id BIGINT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
                name TEXT NOT NULL,
                base_cv BIGINT NOT NULL,
                ccid_floor BIGINT NOT NULL,
                change_count BIGINT NOT NULL DEFAULT 0,
                UNIQUE (user_id, name)
            )
            """,
            """
            CREATE TABLE entities (
                bucket_id BIGINT NOT NULL REFERENCES buckets(id) ON DELETE CASCADE,
                key TEXT COLLATE "C" NOT NULL,
                version INTEGER NOT NULL,
                data TEXT,
                PRIMARY KEY (bucket_id, key)
            )
            """,
            """
            CREATE TABLE entity_versions (
                bucket_id BIGINT NOT NULL REFERENCES buckets(id) ON DELETE CASCADE,
                key TEXT COLLATE "C" NOT NULL,
                version INTEGER NOT NULL,
                data TEXT NOT NULL,
                PRIMARY KEY (bucket_id, key, version)
            )
            """,
            """
            CREATE TABLE changes (
                cv BIGINT PRIMARY KEY,
                bucket_id BIGINT NOT NULL REFERENCES buckets(id) ON DELETE CASCADE,
                key TEXT COLLATE "C" NOT NULL,
                client_id TEXT NOT NULL,
                ccid TEXT NOT NULL,
                operation TEXT NOT NULL,
                diff TEXT,
                source_version INTEGER,
                end_version INTEGER NOT NULL
            )
            """,
            "CREATE INDEX changes_by_bucket ON changes(bucket_id, cv)",
            """
            CREATE TABLE applied_ccids (
                bucket_id BIGINT NOT NULL REFERENCES buckets(id) ON DELETE CASCADE,
                client_id TEXT NOT NULL,
                ccid TEXT NOT NULL,
                cv BIGINT NOT NULL,
                PRIMARY KEY (bucket_id, client_id, ccid)
            )
            """,
            "CREATE INDEX applied_ccids_by_cv ON applied_ccids(bucket_id, cv)",
            """
            CREATE TABLE refused_ccids (
                bucket_id BIGINT NOT NULL REFERENCES buckets(id) ON DELETE CASCADE,
                client_id TEXT NOT NULL,
                ccid TEXT NOT NULL,
                cv BIGINT NOT NULL,
                fingerprint BYTEA NOT NULL,
                code INTEGER NOT NULL,
                PRIMARY KEY (bucket_id, client_id, ccid)
            )
            """,
            "CREATE INDEX refused_ccids_by_cv ON refused_ccids(bucket_id, cv)",
        ]),
        // When the server accepted each kept version (issue 17); older versions show no time.
        (version: 2, sql: ["ALTER TABLE entity_versions ADD COLUMN accepted_at DOUBLE PRECISION"]),
        // The Apptimist App-Server's tables (issue 18), as SQLite's migration "v4 apptimist".
        (version: 3, sql: ApptimistPostgresStore.schema),
        // The Apptimist file locks, shared by the nodes (in memory on SQLite: one node).
        (version: 4, sql: ApptimistPostgresStore.lockSchema),
        // The service's file notices (Docs/apptimist-protocol.md), as SQLite's "v5 apptimist notices".
        (version: 5, sql: ApptimistPostgresStore.noticesSchema),
        // The tag of a compacted log's base cv (issue 35), as SQLite's "v6 base tag".
        (version: 6, sql: ["ALTER TABLE buckets ADD COLUMN base_tag BIGINT"]),
        // Apptimist messages between version 1 and 2 devices (issue 36), as SQLite's "v7 apptimist across versions".
        (version: 7, sql: ApptimistPostgresStore.acrossVersionsSchema),
        // Version 1 clients that follow the seed's header lines (issue 36), as SQLite's "v8 apptimist header lines".
        (version: 8, sql: ApptimistPostgresStore.headerLinesSchema),
        // The history this database serves and where it was served (issue 35), as SQLite's "v9 history".
        (version: 9, sql: [
            "ALTER TABLE server_state ADD COLUMN history BIGINT",
            "ALTER TABLE server_state ADD COLUMN history_origin TEXT",
        ]),
        // `e` answers with the ccid of the change that made the version, as SQLite's "v10 changes by version".
        (version: 10, sql: ["CREATE INDEX changes_by_version ON changes(bucket_id, key, end_version)"]),
    ]

    /// Applies the migrations the database lacks, each in its own transaction, under a
    /// session advisory lock: a second node starting at the same instant waits, then finds
    /// them applied. Returns the versions applied by this call.
    @discardableResult
    static func migrate(_ client: PostgresClient, logger: Logger) async throws -> [Int] {
        // A migration may wait for another node's, and rewrite big tables: minutes, not seconds.
        try await client.withAvailableConnection("migrating the schema", deadline: .seconds(3600)) { connection in
            try await connection.query("SELECT pg_advisory_lock(\(advisoryLockKey))", logger: logger)
            do {
                let applied = try await migrateLocked(connection, logger: logger)
                try await connection.query("SELECT pg_advisory_unlock(\(advisoryLockKey))", logger: logger)
                return applied
            } catch {
                if PostgresAvailability.connectionIsUsable(after: error) {
                    _ = try? await connection.query("SELECT pg_advisory_unlock(\(advisoryLockKey))", logger: logger)
                }
                throw error
            }
        }
    }

    private static func migrateLocked(_ connection: PostgresConnection, logger: Logger) async throws -> [Int] {
        try await connection.query("""
            CREATE TABLE IF NOT EXISTS bucketfs_migrations (
                version INTEGER PRIMARY KEY,
                applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
            )
            """, logger: logger)
        var done = Set<Int>()
        for try await version in try await connection.query("SELECT version FROM bucketfs_migrations", logger: logger).decode(Int.self) {
            done.insert(version)
        }
        var applied: [Int] = []
        for migration in migrations where !done.contains(migration.version) {
            try await connection.withTransaction(logger: logger) { connection in
                for statement in migration.sql {
                    try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger)
                }
                try await connection.query("INSERT INTO bucketfs_migrations (version) VALUES (\(migration.version))", logger: logger)
            }
            applied.append(migration.version)
            logger.info("database migrated", metadata: ["version": "\(migration.version)"])
        }
        return applied
    }
}
