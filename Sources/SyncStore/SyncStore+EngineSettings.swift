import GRDB

extension SyncStore {
    /// A value a sync engine keeps across mounts (Telepat's device id), or nil.
    public func engineSetting(_ name: String) throws(StoreError) -> String? {
        try read { db in try String.fetchOne(db, sql: "SELECT value FROM engine_setting WHERE name = ?", arguments: [name]) }
    }

    /// Keeps `value` under `name`, durably, replacing what was there.
    public func setEngineSetting(_ name: String, to value: String) throws(StoreError) {
        try write { db in
            try db.execute(
                sql: "INSERT INTO engine_setting(name, value) VALUES (?, ?) ON CONFLICT(name) DO UPDATE SET value = excluded.value",
                arguments: [name, value])
        }
    }
}
