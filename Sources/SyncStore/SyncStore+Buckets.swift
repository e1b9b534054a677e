import GRDB

extension SyncStore {
    /// Forgets an empty bucket (rmdir at the mount root). A bucket that still holds entities,
    /// even ones whose removal the server has not acknowledged yet or that are still loading,
    /// or local files, is refused with `bucketNotEmpty`, so nothing owed to the server is lost.
    public func removeBucket(named name: String) throws(StoreError) {
        try write { db in
            let bucketRow = try BucketRow.named(name, db)
            let holdsEntities = try Bool.fetchOne(
                db, sql: "SELECT EXISTS (SELECT 1 FROM entity WHERE bucket_id = ?)", arguments: [bucketRow.id]) ?? false
            let holdsFiles = try Bool.fetchOne(
                db, sql: "SELECT EXISTS (SELECT 1 FROM local_file WHERE bucket_id = ?)", arguments: [bucketRow.id]) ?? false
            if holdsEntities || holdsFiles { throw StoreError.bucketNotEmpty(name) }
            try bucketRow.delete(db)
        }
    }
}
