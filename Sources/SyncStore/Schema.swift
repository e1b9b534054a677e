import GRDB

/// The store's schema as numbered migrations; a merged migration is never edited, only followed.
enum Schema {
    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            // One counter hands out ids for buckets, entities and local files alike, so every
            // node of the mount has a distinct, never-reused number (used as the inode number).
            try db.create(table: "meta") { table in
                table.primaryKey("name", .text)
                table.column("value", .integer).notNull()
            }
            try db.execute(sql: "INSERT INTO meta(name, value) VALUES ('next_node_id', 2)")

            try db.create(table: "bucket") { table in
                table.primaryKey("id", .integer)
                table.column("name", .text).notNull().unique()
                table.column("cv", .text)
                // The `current` of the first index page, promoted to cv when the index is complete.
                table.column("index_cv", .text)
                table.column("index_generation", .integer).notNull().defaults(to: 0)
                table.column("ctime", .integer).notNull()
            }

            try db.create(table: "entity") { table in
                table.primaryKey("id", .integer)
                table.column("bucket_id", .integer).notNull().references("bucket", onDelete: .cascade)
                table.column("key", .text).notNull()
                table.column("ghost_version", .integer)
                table.column("ghost_data", .text).notNull()
                table.column("local_value", .text)
                // NULL while the entity has no file (deleted locally, or waiting for its first `e`).
                table.column("content", .blob)
                table.column("mtime", .integer).notNull()
                table.column("ctime", .integer).notNull()
                table.column("state", .text).notNull()
                table.column("reason", .text)
                table.column("deleted_pending", .boolean).notNull().defaults(to: false)
                table.column("reload_version", .integer)
                table.column("needs_reload", .boolean).notNull().defaults(to: false)
                table.column("seen_generation", .integer).notNull().defaults(to: 0)
                table.uniqueKey(["bucket_id", "key"])
            }

            try db.create(table: "pending_change") { table in
                table.autoIncrementedPrimaryKey("seq")
                table.column("entity_id", .integer).notNull().references("entity", onDelete: .cascade)
                table.column("ccid", .text).notNull().unique()
                table.column("sv", .integer)
                table.column("op", .text).notNull()
                table.column("diff", .text)
                table.column("full_data", .text)
                table.column("state", .text).notNull()
                table.column("created", .integer).notNull()
            }
            try db.create(index: "pending_change_entity", on: "pending_change", columns: ["entity_id"])

            try db.create(table: "local_file") { table in
                table.primaryKey("id", .integer)
                table.column("bucket_id", .integer).notNull().references("bucket", onDelete: .cascade)
                table.column("name", .text).notNull()
                table.column("content", .blob).notNull()
                table.column("mtime", .integer).notNull()
                table.column("ctime", .integer).notNull()
                table.uniqueKey(["bucket_id", "name"])
            }
        }
        migrator.registerMigration("v2") { db in
            // Entity rows hold ~3 copies of the JSON (one SQLite page each for ~1 KB notes), so
            // a scan of a bucket reads every page: the frequent lookups get indexes instead.
            try db.execute(sql: "CREATE INDEX entity_needs_reload ON entity(bucket_id, key) WHERE needs_reload = 1")
            try db.execute(sql: "CREATE INDEX entity_seen_generation ON entity(bucket_id, seen_generation)")
        }
        migrator.registerMigration("v3") { db in
            // A file's inode number follows the file, not the key (POSIX): a rename carries it to
            // the new name, and a name removed and made again gets a new one, since a descriptor
            // may still hold the old. `id` stays the entity row's own identity (changes refer to it).
            // NULL means the row's own id (a row written without it still has a number of its own).
            try db.execute(sql: "ALTER TABLE entity ADD COLUMN node_id INTEGER")
            // What POSIX keeps of a file that is not its bytes: permission bits (chmod) and the
            // access time (touch -a). Local metadata, never sent; NULL: the defaults (0644, mtime).
            for table in ["entity", "local_file"] {
                try db.execute(sql: "ALTER TABLE \(table) ADD COLUMN mode INTEGER")
                try db.execute(sql: "ALTER TABLE \(table) ADD COLUMN atime INTEGER")
            }
        }
        migrator.registerMigration("v4") { db in
            // A local file past `SyncStore.localChunkSize` keeps its bytes in chunks (a scratch
            // file may be gigabytes: more than one SQLite value or the process's memory holds).
            // `content_id` names its chunks (NULL: the bytes are in `content`); `size` its length.
            // A chunk missing, or shorter than the chunk size, reads as zeros (holes cost nothing).
            try db.execute(sql: "ALTER TABLE local_file ADD COLUMN content_id INTEGER")
            try db.execute(sql: "ALTER TABLE local_file ADD COLUMN size INTEGER")
            try db.execute(
                sql: """
                    CREATE TABLE local_chunk (
                        id INTEGER PRIMARY KEY, content_id INTEGER NOT NULL, seq INTEGER NOT NULL, data BLOB NOT NULL,
                        UNIQUE (content_id, seq))
                    """)
            // Chunks no file refers to any more: removed a few at a time after the transaction
            // that dropped them (`reclaimUnusedChunks`), so no write holds the store for a GiB.
            try db.execute(sql: "CREATE TABLE local_garbage (content_id INTEGER PRIMARY KEY)")
            try db.execute(
                sql: """
                    CREATE TRIGGER local_file_chunks_dropped AFTER DELETE ON local_file WHEN old.content_id IS NOT NULL
                    BEGIN INSERT OR IGNORE INTO local_garbage (content_id) VALUES (old.content_id); END
                    """)
            try db.execute(
                sql: """
                    CREATE TRIGGER local_file_chunks_replaced AFTER UPDATE OF content_id ON local_file
                    WHEN old.content_id IS NOT NULL AND old.content_id IS NOT new.content_id
                    BEGIN INSERT OR IGNORE INTO local_garbage (content_id) VALUES (old.content_id); END
                    """)
        }
        migrator.registerMigration("v5 version history") { db in
            // Issue 17: versions of entities fetched from the server for `bucketfs history`
            // (a version's data never changes, so what was fetched is listed offline). Keyed by
            // bucket name: the history outlives the entity and the bucket's rows.
            try db.execute(sql: """
                CREATE TABLE entity_history (
                    bucket TEXT NOT NULL,
                    key TEXT NOT NULL,
                    version INTEGER NOT NULL,
                    data TEXT NOT NULL,
                    accepted_at REAL,
                    PRIMARY KEY (bucket, key, version)
                ) WITHOUT ROWID;
                -- The last server version of an entity the store forgot (deleted here or on the
                -- server), so its history can still be listed and a version restored.
                CREATE TABLE removed_entity (
                    bucket TEXT NOT NULL,
                    key TEXT NOT NULL,
                    last_version INTEGER NOT NULL,
                    PRIMARY KEY (bucket, key)
                ) WITHOUT ROWID;
                CREATE TRIGGER entity_removal_remembered AFTER DELETE ON entity
                WHEN OLD.ghost_version IS NOT NULL BEGIN
                    INSERT OR REPLACE INTO removed_entity (bucket, key, last_version)
                    SELECT name, OLD.key, OLD.ghost_version FROM bucket WHERE id = OLD.bucket_id;
                END;
                """)
        }
        migrator.registerMigration("v6 file format") { db in
            // How a bucket's entities show as files when not as JSON (`EntityFileFormat`, set by
            // the mount's options): kept, so every process reads the files the same way and a
            // change of view re-renders them once.
            try db.create(table: "bucket_file_format") { table in
                table.primaryKey("bucket_id", .integer).references("bucket", onDelete: .cascade)
                table.column("format", .text).notNull()
            }
        }
        migrator.registerMigration("v7 engine settings") { db in
            // What a sync engine keeps of its own across mounts (Telepat's device id).
            try db.create(table: "engine_setting") { table in
                table.primaryKey("name", .text)
                table.column("value", .text).notNull()
            }
        }
        migrator.registerMigration("v8 save journal") { db in
            // The last save of the mount's journal (`SaveJournal`) the store has, written in the
            // transaction that applies it: a replay after a crash skips what is already here.
            try db.create(table: "save_journal") { table in
                table.column("applied_through", .integer).notNull()
            }
            try db.execute(sql: "INSERT INTO save_journal(applied_through) VALUES (0)")
        }
        migrator.registerMigration("v9 authorship") { db in
            // Issue 35: who sends again what a server restored from a backup lost. `authored`:
            // the entity's acknowledged version is the result of a change of ours;
            // `removed_here`: the removal this store remembers was ours. Rows from before
            // count as ours (every replica sent everything again then).
            try db.execute(sql: "ALTER TABLE entity ADD COLUMN authored INTEGER NOT NULL DEFAULT 0")
            try db.execute(sql: "UPDATE entity SET authored = 1 WHERE ghost_version IS NOT NULL")
            try db.execute(sql: "ALTER TABLE removed_entity ADD COLUMN removed_here INTEGER NOT NULL DEFAULT 0")
            try db.execute(sql: "UPDATE removed_entity SET removed_here = 1")
            // `server_loss`: the last re-index that found the server had lost changes of this
            // store (its generation, when, how many notes were sent again), for `bucketfs status`.
            // A re-index listed an entity of ours at a newer version with other data: newer in
            // our history, or from another one (a restore of a backup from before an earlier
            // restore)? The listed version waits here while `e` asks for ours (`load`).
            try db.execute(sql: """
                CREATE TABLE server_loss (
                    bucket_id INTEGER PRIMARY KEY REFERENCES bucket(id) ON DELETE CASCADE,
                    index_generation INTEGER NOT NULL,
                    detected_at INTEGER NOT NULL,
                    notes INTEGER NOT NULL
                );
                CREATE TABLE listed_version (
                    entity_id INTEGER PRIMARY KEY REFERENCES entity(id) ON DELETE CASCADE,
                    version INTEGER NOT NULL,
                    data TEXT NOT NULL
                )
                """)
        }
        migrator.registerMigration("v10 highest versions") { db in
            // Issue 35: the highest server version this store has known of each entity it
            // forgot, or whose version went down or away (a server restored from a backup
            // numbers versions on from the backup's, or lost the entity: it is created again).
            // A removal of ours is sent again to a restored server that lists the entity at any
            // version up to it: that version came before the removal, in one history or another.
            // `removed_entity.last_version` alone, lowered by a restore, let a later restore of a
            // backup from before the first bring a removed note back.
            try db.execute(sql: """
                CREATE TABLE entity_highest_version (
                    bucket TEXT NOT NULL,
                    key TEXT NOT NULL,
                    version INTEGER NOT NULL,
                    PRIMARY KEY (bucket, key)
                ) WITHOUT ROWID;
                INSERT INTO entity_highest_version (bucket, key, version)
                    SELECT bucket, key, last_version FROM removed_entity WHERE true;
                CREATE TRIGGER entity_removal_highest_version AFTER DELETE ON entity
                WHEN OLD.ghost_version IS NOT NULL BEGIN
                    INSERT INTO entity_highest_version (bucket, key, version)
                    SELECT name, OLD.key, OLD.ghost_version FROM bucket WHERE id = OLD.bucket_id
                    ON CONFLICT (bucket, key) DO UPDATE SET version = max(version, excluded.version);
                END;
                CREATE TRIGGER entity_lowered_highest_version AFTER UPDATE OF ghost_version ON entity
                WHEN OLD.ghost_version IS NOT NULL AND (NEW.ghost_version IS NULL OR NEW.ghost_version < OLD.ghost_version) BEGIN
                    INSERT INTO entity_highest_version (bucket, key, version)
                    SELECT name, OLD.key, OLD.ghost_version FROM bucket WHERE id = OLD.bucket_id
                    ON CONFLICT (bucket, key) DO UPDATE SET version = max(version, excluded.version);
                END;
                """)
        }
        migrator.registerMigration("v11 edit counts") { db in
            // Issue 34: which saves of a file the server has acknowledged (`EntityRow.editSeq`).
            // Rows from before count as holding an unacknowledged edit, as every local value
            // that differed from the server's did then; the next acknowledgement settles them.
            try db.execute(sql: """
                ALTER TABLE entity ADD COLUMN edit_seq INTEGER NOT NULL DEFAULT 0;
                ALTER TABLE entity ADD COLUMN acknowledged_edit_seq INTEGER NOT NULL DEFAULT 0;
                ALTER TABLE pending_change ADD COLUMN edit_seq INTEGER NOT NULL DEFAULT 0;
                UPDATE entity SET edit_seq = 1 WHERE local_value IS NOT NULL;
                UPDATE pending_change SET edit_seq = 1;
                """)
        }
        migrator.registerMigration("v12 authored ccid") { db in
            // Which change of ours made the acknowledged version (`EntityRow.authoredCCID`); rows
            // from before do not know, and compare a restored server's version by its data alone.
            try db.execute(sql: "ALTER TABLE entity ADD COLUMN authored_ccid TEXT")
        }
        migrator.registerMigration("v13 saves parsed later") { db in
            // Issue 37: a save of several MiB goes into the store as its bytes alone, and is
            // parsed, diffed and queued afterwards, off the path of every other file's save
            // (`EntityRow.unparsed`). The partial index finds the few such rows at once.
            try db.execute(sql: """
                ALTER TABLE entity ADD COLUMN unparsed INTEGER NOT NULL DEFAULT 0;
                CREATE INDEX entity_unparsed ON entity (bucket_id) WHERE unparsed = 1;
                """)
        }
        migrator.registerMigration("v14 local value kept once") { db in
            // Issues 37 and 40: a synced note's local value is the ghost's text, byte for byte;
            // the row keeps it once (`EntityRow.localIsGhost`: `local_value` NULL, read as
            // `ghost_data`). A note of 80 bytes took 402 bytes of store, one of 16 MiB three
            // copies rewritten by every update of its row.
            try db.execute(sql: """
                ALTER TABLE entity ADD COLUMN local_is_ghost INTEGER NOT NULL DEFAULT 0;
                UPDATE entity SET local_value = NULL, local_is_ghost = 1 WHERE local_value = ghost_data;
                """)
        }
        migrator.registerMigration("v15 entity bytes kept apart") { db in
            // Issue 37: a file's bytes in a table of their own (`EntityRow.content(_:)`), read
            // only when asked for. In the entity's row they were read and written again by every
            // update of its value or sync state (SQLite rewrites a row whole: a note of 16 MiB
            // took four copies in memory to record an acknowledgement), and every read of a
            // column after them walked their overflow pages. `file_size`: NULL while the
            // entity has no file, as `content` was.
            // `unparsed` becomes a token (nonzero: the bytes wait), so that the parse of a save
            // made before its transaction can tell the bytes it parsed from newer ones without
            // reading them again (`finishDeferredParse`).
            try db.execute(sql: """
                CREATE TABLE entity_content (
                    entity_id INTEGER PRIMARY KEY REFERENCES entity(id) ON DELETE CASCADE,
                    bytes BLOB NOT NULL
                );
                INSERT INTO entity_content (entity_id, bytes) SELECT id, CAST(content AS BLOB) FROM entity WHERE content IS NOT NULL;
                ALTER TABLE entity ADD COLUMN file_size INTEGER;
                UPDATE entity SET file_size = length(CAST(content AS BLOB)) WHERE content IS NOT NULL;
                ALTER TABLE entity DROP COLUMN content;
                DROP INDEX entity_unparsed;
                CREATE INDEX entity_unparsed ON entity (bucket_id) WHERE unparsed != 0;
                """)
        }
        return migrator
    }

    /// Hands out the next node id inside the caller's transaction.
    static func allocateNodeID(_ db: Database) throws -> Int64 {
        try allocateNodeIDs(db, count: 1)
    }

    /// Hands out `count` consecutive node ids (the first is returned) inside the caller's transaction.
    static func allocateNodeIDs(_ db: Database, count: Int) throws -> Int64 {
        let statement = try db.cachedStatement(
            sql: "UPDATE meta SET value = value + ? WHERE name = 'next_node_id' RETURNING value - ?")
        guard let first = try Int64.fetchOne(statement, arguments: [count, count]) else {
            throw StoreError.corruptRow("meta.next_node_id missing")
        }
        return first
    }
}
