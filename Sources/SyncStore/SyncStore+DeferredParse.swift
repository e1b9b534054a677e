import Foundation
import GRDB
import JSONDiff

/// What finishing a save left unparsed made of it.
public struct FinishedParse: Hashable, Sendable {
    /// The change to send now, if the entity has none in flight.
    public let readyToSend: OutgoingChange?
    /// Set when the bytes are not a JSON object: they are kept, but nothing is sent.
    public let parseError: String?
    /// The file's size (what the parse held in memory).
    public let byteCount: Int
}

/// Saves parsed after their transaction (issue 37). A note of several MiB took seconds to
/// parse, diff and queue inside the transaction that applied its save, and every save after it
/// (a 1 KB note's too) waited: the mount's journaled saves of that size go in as their bytes
/// alone (`save`'s `parsingLaterFrom`, `EntityRow.unparsed`), and `finishDeferredParse` does
/// the rest, its parse outside any transaction.
///
/// Until then the entity's value, edit count and queued change are those of the save before:
/// the store acts as if the save had not come yet, except that its file shows the new bytes.
/// So whatever reads the value to merge with it or writes the file from it parses those bytes
/// first, in its own transaction (`parseFirst`): what applies remote data, a removal, a rename,
/// an edit of the value, a change of file format. A crash leaves the bytes and the flag: the
/// next mount parses them (`entitiesParsedLater`).
extension SyncStore {
    /// Changes of saves parsed later (`finishDeferredParse`) whose diff takes more than `bytes`
    /// are refused as they are queued (`rejected:413`, kept locally), as the engine refuses
    /// one too large for a message: handed over, each was read back, marked sent and refused,
    /// three rewrites of a row holding the note while other saves waited (issue 37).
    public func refuseChanges(largerThan bytes: Int) {
        changeSizeLimit.withLock { $0 = bytes }
    }

    /// Why a change of `bytes` is not sent where a message carries at most `limit`.
    public static func tooLargeToSend(bytes: Int, limit: Int) -> String {
        let mebibytes = { (bytes: Int) in String(format: "%.1f MiB", Double(bytes) / 1_048_576) }
        return "too large to send: the change takes \(mebibytes(bytes)), over the \(mebibytes(limit)) "
            + "one message may carry (413); kept locally"
    }

    /// The entities whose saved bytes wait to be parsed, oldest first.
    public func entitiesParsedLater() throws(StoreError) -> [(bucket: String, key: String)] {
        try read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT b.name AS bucket, e.key AS key FROM entity e JOIN bucket b ON b.id = e.bucket_id
                    WHERE e.unparsed = 1 ORDER BY e.ctime
                    """
            ).map { row in (bucket: row["bucket"] as String, key: row["key"] as String) }
        }
    }

    /// Parses, diffs and queues the save of `key` left for later: the parse (and the value's
    /// compact text) outside any transaction, the rest in a short one. Nil when nothing waits
    /// (parsed already, saved over or removed since).
    public func finishDeferredParse(bucket: String, key: String) throws(StoreError) -> FinishedParse? {
        while true {
            let waiting = try read { db -> (bytes: Data, format: any EntityFileFormat, ghost: String)? in
                let bucketRow = try BucketRow.named(bucket, db)
                guard let row = try EntityRow.find(bucketID: bucketRow.id, key: key, db), row.unparsed, let bytes = row.content else {
                    return nil
                }
                return (bytes, bucketRow.format, row.ghostData)
            }
            guard let waiting else { return nil }
            // Everything that costs in proportion to the note, before the transaction: the parse,
            // the value's text, its diff from the ghost and the diff's text.
            let parsed = Self.parseSaved(waiting.bytes, in: waiting.format, at: Self.now())
            let value = try? parsed.get()
            let compact = value.map(StoredJSON.text)
            // (A ghost that cannot be read is left to the transaction, which fails as any would.)
            let diffed = value.flatMap { value -> ComputedDiff? in
                guard let ghost = try? StoredJSON.object(waiting.ghost, column: "ghost_data") else { return nil }
                // Over nothing (a new note, mostly), the text alone: the diff of a note of many
                // small keys is an object of two members per key, ten times the note in memory.
                if ghost.isEmpty {
                    let text = JSONValue.compactCreationDiff(of: value, compactLength: compact?.utf8.count)
                    return ComputedDiff(ghost: waiting.ghost, diff: nil, text: text)
                }
                guard let diff = try? Merge.diff(from: ghost, to: value) else { return nil }
                return ComputedDiff(ghost: waiting.ghost, diff: diff, text: StoredJSON.text(diff))
            }
            let finished = try write(.deferred) { db -> FinishedParse?? in
                let bucketRow = try BucketRow.named(bucket, db)
                guard var row = try EntityRow.find(bucketID: bucketRow.id, key: key, db), row.unparsed, let bytes = row.content else {
                    return .some(nil)
                }
                // Saved again meanwhile: the newer bytes are the ones to parse.
                guard bytes == waiting.bytes else { return nil }
                row.unparsed = false
                let saved = try Self.settle(
                    &row, parsed: parsed, compact: compact, diffed: diffed, refusingOver: changeSizeLimit.withLock { $0 }, isNew: false,
                    bucket: bucketRow, db)
                return FinishedParse(readyToSend: saved.readyToSend, parseError: saved.parseError, byteCount: bytes.count)
            }
            if let finished { return finished }
        }
    }

    /// Inside a transaction about to read the value of `bucket`'s entities `keys` (nil: all of
    /// them) or write their files from it: parses first the saves among them left for later.
    /// Returns the changes that made ready to send.
    func parseFirst(keys: @autoclosure () -> [String]?, bucket: BucketRow, _ db: Database) throws -> [OutgoingChange] {
        guard mayHaveUnparsed.withLock({ $0 }) else { return [] }
        // Their keys first: a row holds a note of several MiB, read only if it is one of these.
        let waiting = try Row.fetchAll(
            db.cachedStatement(sql: "SELECT id, key FROM entity WHERE bucket_id = ? AND unparsed = 1"), arguments: [bucket.id])
        guard !waiting.isEmpty else { return [] }
        // Keys by their bytes, as the store's rows are.
        let wanted: Set<JSONKey>? = keys().map { keys in Set(keys.map { key in JSONKey(key) }) }
        var ready: [OutgoingChange] = []
        for entry in waiting where wanted?.contains(JSONKey(entry["key"] as String)) ?? true {
            guard var row = try EntityRow.fetchOne(db, key: entry["id"] as Int64) else { continue }
            if let change = try Self.parseNow(&row, bucket: bucket, db) { ready.append(change) }
        }
        return ready
    }

    /// Bytes a save left unparsed, parsed as that save would have: only formats that parse the
    /// bytes alone (no base) leave them so.
    static func parseSaved(_ bytes: Data, in format: any EntityFileFormat, at time: StoreTime) -> Result<JSONObject, EntityFileFormatError> {
        format.parse([UInt8](bytes), base: nil, replacingFile: true, at: time)
    }

    /// `parseFirst` for a row the caller holds: parses its bytes if they wait, and writes it.
    static func parseNow(_ row: inout EntityRow, bucket: BucketRow, _ db: Database) throws -> OutgoingChange? {
        guard row.unparsed, let bytes = row.content else { return nil }
        let parsed = parseSaved(bytes, in: bucket.format, at: row.ctime)
        row.unparsed = false
        return try settle(&row, parsed: parsed, isNew: false, bucket: bucket, db).readyToSend
    }
}
