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
        return migrator
    }

    /// Hands out the next node id inside the caller's transaction.
    static func allocateNodeID(_ db: Database) throws -> Int64 {
        guard let next = try Int64.fetchOne(db, sql: "SELECT value FROM meta WHERE name = 'next_node_id'") else {
            throw StoreError.corruptRow("meta.next_node_id missing")
        }
        try db.execute(sql: "UPDATE meta SET value = ? WHERE name = 'next_node_id'", arguments: [next + 1])
        return next
    }
}
