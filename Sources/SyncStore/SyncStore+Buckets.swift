import GRDB

extension SyncStore {
    /// Forgets an empty bucket (rmdir at the mount root). A bucket that still holds entities
    /// (also ones still loading) or local files is refused with `bucketNotEmpty`; one holding only
    /// removals the server has not acknowledged yet with `bucketAwaitsRemovals`: nothing owed to
    /// the server is lost.
    public func removeBucket(named name: String) throws(StoreError) {
        try write { db in
            let bucketRow = try BucketRow.named(name, db)
            // NULL: no entity; false: one that has (or will have) a file; true: only pending removals.
            let onlyRemovals = try Bool.fetchOne(
                db, sql: "SELECT MIN(deleted_pending) FROM entity WHERE bucket_id = ?", arguments: [bucketRow.id])
            let holdsFiles = try Bool.fetchOne(
                db, sql: "SELECT EXISTS (SELECT 1 FROM local_file WHERE bucket_id = ?)", arguments: [bucketRow.id]) ?? false
            if onlyRemovals == false || holdsFiles { throw StoreError.bucketNotEmpty(name) }
            if onlyRemovals == true { throw StoreError.bucketAwaitsRemovals(name) }
            try bucketRow.delete(db)
        }
    }
}
