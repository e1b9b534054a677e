import GRDB

/// The server database schema as numbered migrations (never edit one once merged; add another).
enum ServerSchema {
    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            // One row holding the last change version handed out; cvs are this counter in hex,
            // so their order is SQL order and survives restarts.
            try db.execute(sql: """
                CREATE TABLE server_state (
                    id INTEGER PRIMARY KEY CHECK (id = 1),
                    last_cv INTEGER NOT NULL
                );
                INSERT INTO server_state (id, last_cv) VALUES (1, 0);

                CREATE TABLE users (
                    id INTEGER PRIMARY KEY AUTOINCREMENT,
                    username TEXT NOT NULL UNIQUE,
                    public_id TEXT NOT NULL UNIQUE,
                    password_hash BLOB NOT NULL,
                    password_salt BLOB NOT NULL,
                    password_iterations INTEGER NOT NULL,
                    created_at REAL NOT NULL
                );

                CREATE TABLE tokens (
                    token_hash BLOB PRIMARY KEY,
                    user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
                    created_at REAL NOT NULL
                ) WITHOUT ROWID;
                CREATE INDEX tokens_by_user ON tokens(user_id);

                -- base_cv: the oldest cv a client may catch up from (bucket creation, or the
                -- newest compacted change). ccid_floor: applied ccids at or below it are pruned.
                CREATE TABLE buckets (
                    id INTEGER PRIMARY KEY AUTOINCREMENT,
                    user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
                    name TEXT NOT NULL,
                    base_cv INTEGER NOT NULL,
                    ccid_floor INTEGER NOT NULL,
                    change_count INTEGER NOT NULL DEFAULT 0,
                    UNIQUE (user_id, name)
                );

                -- data NULL: deleted (a tombstone keeps the version so re-creation continues it).
                CREATE TABLE entities (
                    bucket_id INTEGER NOT NULL REFERENCES buckets(id) ON DELETE CASCADE,
                    key TEXT NOT NULL,
                    version INTEGER NOT NULL,
                    data TEXT,
                    PRIMARY KEY (bucket_id, key)
                ) WITHOUT ROWID;

                CREATE TABLE entity_versions (
                    bucket_id INTEGER NOT NULL REFERENCES buckets(id) ON DELETE CASCADE,
                    key TEXT NOT NULL,
                    version INTEGER NOT NULL,
                    data TEXT NOT NULL,
                    PRIMARY KEY (bucket_id, key, version)
                ) WITHOUT ROWID;

                CREATE TABLE changes (
                    cv INTEGER PRIMARY KEY,
                    bucket_id INTEGER NOT NULL REFERENCES buckets(id) ON DELETE CASCADE,
                    key TEXT NOT NULL,
                    client_id TEXT NOT NULL,
                    ccid TEXT NOT NULL,
                    operation TEXT NOT NULL,
                    diff TEXT,
                    source_version INTEGER,
                    end_version INTEGER NOT NULL
                );
                CREATE INDEX changes_by_bucket ON changes(bucket_id, cv);

                CREATE TABLE applied_ccids (
                    bucket_id INTEGER NOT NULL REFERENCES buckets(id) ON DELETE CASCADE,
                    client_id TEXT NOT NULL,
                    ccid TEXT NOT NULL,
                    cv INTEGER NOT NULL,
                    PRIMARY KEY (bucket_id, client_id, ccid)
                ) WITHOUT ROWID;
                CREATE INDEX applied_ccids_by_cv ON applied_ccids(bucket_id, cv);
                """)
        }
        migrator.registerMigration("v2 refused ccids") { db in
            // Issue 13: a ccid is answered once. A refusal is remembered like an application
            // (pruned with the applied ccids, by the cv current when it was refused), with a
            // fingerprint of the request: the same request again gets the same code, never a
            // later application; a different one with that ccid (a client's 404/405/440
            // recovery resends the change rewritten) is a new request.
            try db.execute(sql: """
                CREATE TABLE refused_ccids (
                    bucket_id INTEGER NOT NULL REFERENCES buckets(id) ON DELETE CASCADE,
                    client_id TEXT NOT NULL,
                    ccid TEXT NOT NULL,
                    cv INTEGER NOT NULL,
                    fingerprint BLOB NOT NULL,
                    code INTEGER NOT NULL,
                    PRIMARY KEY (bucket_id, client_id, ccid)
                ) WITHOUT ROWID;
                CREATE INDEX refused_ccids_by_cv ON refused_ccids(bucket_id, cv);
                """)
        }
        migrator.registerMigration("v3 accepted times") { db in
            // Issue 17: when the server accepted each kept version (Unix seconds), sent with `e`
            // replies for `bucketfs history`. Versions kept from before have none (NULL).
            try db.execute(sql: "ALTER TABLE entity_versions ADD COLUMN accepted_at REAL")
        }
        migrator.registerMigration("v4 apptimist") { db in
            // Issue 18: the Apptimist App-Server's accounts, files, message queues and vouches
            // (ApptimistSQLiteStore). Keys, names, file names and message ids are the protocol's
            // bytes; message data stays sealed (the service cannot open it).
            try db.execute(sql: ApptimistSQLiteStore.schema)
        }
        migrator.registerMigration("v5 apptimist notices") { db in
            // The service's file notices (Docs/apptimist-protocol.md): one queued per owner and file.
            try db.execute(sql: ApptimistSQLiteStore.noticesSchema)
        }
        migrator.registerMigration("v6 base tag") { db in
            // Issue 35: the tag of the cv a compacted log's base stands for (`ChangeSequence`):
            // the last change compaction dropped. NULL: a base no change named (a new bucket).
            try db.execute(sql: "ALTER TABLE buckets ADD COLUMN base_tag INTEGER")
        }
        migrator.registerMigration("v7 apptimist across versions") { db in
            // Issue 36: messages between version 1 and version 2 devices (Docs/apptimist-protocol.md).
            try db.execute(sql: ApptimistSQLiteStore.acrossVersionsSchema)
        }
        migrator.registerMigration("v8 apptimist header lines") { db in
            // Issue 36: version 1 clients that follow the seed's header lines (Docs/apptimist-protocol.md).
            try db.execute(sql: ApptimistSQLiteStore.headerLinesSchema)
        }
        migrator.registerMigration("v9 history") { db in
            // Issue 35: the history this database serves and where it was served (`ServerHistory`).
            try db.execute(sql: """
                ALTER TABLE server_state ADD COLUMN history INTEGER;
                ALTER TABLE server_state ADD COLUMN history_origin TEXT;
                """)
        }
        migrator.registerMigration("v10 changes by version") { db in
            // `e` answers with the ccid of the change that made the version asked for: a client
            // tells its own version from another history's of the same number and data (issue
            // 34's model run: two restores, from backups in reverse order).
            try db.execute(sql: "CREATE INDEX changes_by_version ON changes(bucket_id, key, end_version)")
        }
        return migrator
    }
}
