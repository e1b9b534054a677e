import Foundation
import GRDB
import JSONDiff
import Synchronization

extension SyncStore {
    /// Sets how the bucket's entities show as files (nil: as JSON), creating the bucket if it is
    /// new. Kept in the store; when it differs from the one kept, every file of the bucket is
    /// rendered again (their times change with their bytes). Files holding bytes that were no
    /// value (state `invalid`) keep them. Call it before mounting: a mounted view does not notice.
    public func setFileFormat(_ format: (any EntityFileFormat)?, forBucket name: String) throws(StoreError) {
        _ = try ensureBucket(name)
        try write { db in
            var bucket = try BucketRow.named(name, db)
            let stored = StoredFileFormat.text(bucket.format)
            let wanted = format.flatMap(StoredFileFormat.text)
            guard stored != wanted else { return }
            // Bytes saved but not parsed yet are read in the format they were written in.
            _ = try parseFirst(keys: nil, bucket: bucket, db)
            if let wanted {
                try db.execute(
                    sql: "INSERT INTO bucket_file_format (bucket_id, format) VALUES (?, ?) ON CONFLICT (bucket_id) DO UPDATE SET format = excluded.format",
                    arguments: [bucket.id, wanted])
            } else {
                try db.execute(sql: "DELETE FROM bucket_file_format WHERE bucket_id = ?", arguments: [bucket.id])
            }
            bucket.format = format ?? JSONFileFormat()
            let now = Self.now()
            let rows = try EntityRow.fetchAll(
                db, sql: """
                    SELECT * FROM entity WHERE bucket_id = ? AND (local_value IS NOT NULL OR local_is_ghost) AND deleted_pending = 0
                    """,
                arguments: [bucket.id])
            for var row in rows where row.state != EntityState.invalid.description {
                guard let value = try row.local() else { continue }
                try row.render(value, in: bucket.format, now: now, db)
                try row.update(db)
            }
        }
    }

    /// How the bucket's entities show as files (`JSONFileFormat` unless one was set).
    public func fileFormat(ofBucket name: String) throws(StoreError) -> any EntityFileFormat {
        try read { db in try BucketRow.named(name, db).format }
    }
}

/// A bucket's file format as the store keeps it: JSON text describing it; none for JSON.
enum StoredFileFormat {
    private static let decoded = Mutex<[String: any EntityFileFormat]>([:])

    static func text(_ format: any EntityFileFormat) -> String? {
        if let bytes = format as? BytesFieldFormat {
            var object: JSONObject = ["bytes": .string(bytes.field), "extension": .string(bytes.fileExtension)]
            if bytes.readOnly { object["readonly"] = .bool(true) }
            if !bytes.readOnlyKeys.isEmpty { object["readonlyKeys"] = .array(bytes.readOnlyKeys.sorted().map(JSONValue.string)) }
            return JSONValue.object(object).compactRendered()
        }
        guard let text = format as? TextFieldFormat else { return nil }
        var object: JSONObject = ["text": .string(text.field), "extension": .string(text.fileExtension)]
        if let touch = text.touchField { object["touch"] = .string(touch) }
        if let trash = text.trashField { object["trash"] = .string(trash) }
        if !text.template.isEmpty { object["template"] = .object(text.template) }
        return JSONValue.object(object).compactRendered()
    }

    /// The format a kept text describes (decoded once per text: every save looks it up).
    static func format(_ text: String) -> any EntityFileFormat {
        if let known = decoded.withLock({ $0[text] }) { return known }
        let format: any EntityFileFormat
        if let object = (try? JSONValue(parsing: text))?.objectValue, let field = object["bytes"]?.stringValue {
            format = BytesFieldFormat(
                field: field, fileExtension: object["extension"]?.stringValue ?? "", readOnly: object["readonly"]?.boolValue == true,
                readOnlyKeys: Set((object["readonlyKeys"]?.arrayValue ?? []).compactMap(\.stringValue)))
        } else if let object = (try? JSONValue(parsing: text))?.objectValue, let field = object["text"]?.stringValue {
            format = TextFieldFormat(
                field: field, fileExtension: object["extension"]?.stringValue ?? "txt", touchField: object["touch"]?.stringValue,
                trashField: object["trash"]?.stringValue, template: object["template"]?.objectValue ?? [:])
        } else {
            format = JSONFileFormat()
        }
        decoded.withLock { $0[text] = format }
        return format
    }
}
