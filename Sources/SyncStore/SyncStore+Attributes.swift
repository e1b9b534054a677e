import GRDB

extension SyncStore {
    /// Sets the modification time a file shows (utimensat: `touch`, `rsync -a`, `cp -p`),
    /// durably, so it is the same after a remount. The change time becomes now, as POSIX says.
    /// Returns the file as it now is.
    @discardableResult
    public func setModificationTime(
        bucket: String, name: EntryName, mtime: StoreTime, durability: Durability = .synced
    ) throws(StoreError) -> DirectoryEntry {
        try write(durability) { db in
            let bucketRow = try BucketRow.named(bucket, db)
            let now = Self.now()
            switch name {
            case .entity(let key):
                // Only an entity with a file has a time to set (not one deleted locally or not loaded yet).
                try db.execute(
                    sql: "UPDATE entity SET mtime = ?, ctime = ? WHERE bucket_id = ? AND key = ? AND file_size IS NOT NULL",
                    arguments: [mtime, now, bucketRow.id, key])
                guard db.changesCount > 0 else { throw StoreError.unknownEntity(bucket: bucket, key: key) }
            case .localFile(let fileName):
                try db.execute(
                    sql: "UPDATE local_file SET mtime = ?, ctime = ? WHERE bucket_id = ? AND name = ?",
                    arguments: [mtime, now, bucketRow.id, fileName])
                guard db.changesCount > 0 else { throw StoreError.unknownLocalFile(bucket: bucket, name: fileName) }
            }
            guard let updated = try Self.lookup(bucket: bucket, name: name, db) else {
                throw StoreError.database("\(name) is missing after setting its time")
            }
            return updated
        }
    }

    /// Sets a file's permission bits and/or access time (chmod, `touch -a`; nil: unchanged),
    /// durably: local metadata, never sent. The change time becomes now, as POSIX says.
    @discardableResult
    public func setAttributes(
        bucket: String, name: EntryName, mode: Int64?, atime: StoreTime?, durability: Durability = .synced
    ) throws(StoreError) -> DirectoryEntry {
        try write(durability) { db in
            let bucketRow = try BucketRow.named(bucket, db)
            let arguments: StatementArguments = [mode, atime, Self.now()]
            switch name {
            case .entity(let key):
                try db.execute(
                    sql: """
                        UPDATE entity SET mode = COALESCE(?, mode), atime = COALESCE(?, atime), ctime = ?
                        WHERE bucket_id = ? AND key = ? AND file_size IS NOT NULL
                        """,
                    arguments: arguments + [bucketRow.id, key])
                guard db.changesCount > 0 else { throw StoreError.unknownEntity(bucket: bucket, key: key) }
            case .localFile(let fileName):
                try db.execute(
                    sql: """
                        UPDATE local_file SET mode = COALESCE(?, mode), atime = COALESCE(?, atime), ctime = ?
                        WHERE bucket_id = ? AND name = ?
                        """,
                    arguments: arguments + [bucketRow.id, fileName])
                guard db.changesCount > 0 else { throw StoreError.unknownLocalFile(bucket: bucket, name: fileName) }
            }
            guard let updated = try Self.lookup(bucket: bucket, name: name, db) else {
                throw StoreError.database("\(name) is missing after setting its attributes")
            }
            return updated
        }
    }
}
