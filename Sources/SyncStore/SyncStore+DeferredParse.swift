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
                    WHERE e.unparsed != 0 ORDER BY e.ctime
                    """
            ).map { row in (bucket: row["bucket"] as String, key: row["key"] as String) }
        }
    }

    /// Parses, diffs and queues the save of `key` left for later: the parse (and the value's
    /// compact text) outside any transaction, the rest in a short one. Nil when nothing waits
    /// (parsed already, saved over or removed since).
    public func finishDeferredParse(bucket: String, key: String) throws(StoreError) -> FinishedParse? {
        while true {
            // Everything that costs in proportion to the note, before the transaction; the bytes
            // (this block's) and the parsed value (`prepareParsedSave`'s) are let go before it.
            let token: Int64
            let prepared: Result<(compact: String, diffed: ComputedDiff?), EntityFileFormatError>
            do {
                var waiting = try read { db -> (bytes: [UInt8], token: Int64, format: any EntityFileFormat, ghost: String)? in
                    let bucketRow = try BucketRow.named(bucket, db)
                    guard let row = try EntityRow.find(bucketID: bucketRow.id, key: key, db), row.unparsed,
                        let bytes = try row.content(db)
                    else { return nil }
                    return (bytes, row.unparsedToken, bucketRow.format, row.ghostData)
                }
                guard let found = waiting.map({ (token: $0.token, format: $0.format, ghost: $0.ghost) }) else { return nil }
                token = found.token
                let bytes = waiting?.bytes ?? []
                waiting = nil
                prepared = Self.prepareParsedSave(
                    consume bytes, in: found.format, ghost: found.ghost, refusingOver: changeSizeLimit.withLock { $0 })
            }
            afterDeferredParse.withLock { $0 }?.body()
            let finished = try write(.deferred) { db -> FinishedParse?? in
                let bucketRow = try BucketRow.named(bucket, db)
                guard var row = try EntityRow.find(bucketID: bucketRow.id, key: key, db), row.unparsed else {
                    return .some(nil)
                }
                // Saved again meanwhile (a token of its own): the newer bytes are the ones to parse.
                guard row.unparsedToken == token else { return nil }
                row.unparsed = false
                let limit = changeSizeLimit.withLock { $0 }
                let saved: SavedRow
                switch prepared {
                case .success(let prepared):
                    saved = try Self.settle(
                        &row, value: nil, compact: prepared.compact, diffed: prepared.diffed, refusingOver: limit, isNew: false,
                        bucket: bucketRow, db)
                case .failure(let problem):
                    saved = try Self.settle(&row, parsed: .failure(problem), isNew: false, bucket: bucketRow, db)
                }
                return FinishedParse(readyToSend: saved.readyToSend, parseError: saved.parseError, byteCount: row.fileSize ?? 0)
            }
            if let finished { return finished }
        }
    }

    /// A save's value as its compact text and its diff from `ghost` (the stored text), and the
    /// diff's text: the parse and everything else that costs in proportion to the note, made
    /// outside any transaction. The parsed value is not kept: of a note of many small keys it
    /// takes three times the text, and a new note's (over an empty ghost) is not even built when
    /// the format makes its text without it (`EntityFileFormat.compactValuePieces`). A creation
    /// diff of more than `limit` bytes is not written (`ComputedDiff.init(ghost:refused:)`).
    static func prepareParsedSave(
        _ bytes: consuming [UInt8], in format: any EntityFileFormat, ghost ghostText: String, refusingOver limit: Int?
    ) -> Result<(compact: String, diffed: ComputedDiff?), EntityFileFormatError> {
        // (A ghost that cannot be read is left to the transaction, which fails as any would.)
        let ghost = try? StoredJSON.object(ghostText, column: "ghost_data")
        let compact: String
        let members: Int
        if let ghost, ghost.isEmpty, let pieces = format.compactValuePieces(parsing: bytes) {
            // The note's bytes go before its text is put together: the two are never held at once.
            _ = consume bytes
            (compact, members) = pieces.text()
        } else {
            // The bytes go once parsed, the value with this block.
            let parsed = parseSaved(bytes, in: format, at: now())
            _ = consume bytes
            let value: JSONObject
            switch consume parsed {
            case .success(let parsed): value = parsed
            case .failure(let problem): return .failure(problem)
            }
            compact = StoredJSON.text(value)
            members = value.count
            if let ghost, !ghost.isEmpty {
                guard let diff = try? Merge.diff(from: ghost, to: value) else { return .success((compact, nil)) }
                return .success((compact, ComputedDiff(ghost: ghostText, diff: diff, text: StoredJSON.text(diff))))
            }
        }
        // Over nothing (a new note, mostly), from the value's text once the value is gone: the
        // diff of a note of many small keys is an object of two members per key, ten times the
        // note in memory.
        guard ghost != nil else { return .success((compact, nil)) }
        let byteCount = JSONValue.compactCreationDiffLength(compactLength: compact.utf8.count, members: members)
        if let limit, byteCount > limit { return .success((compact, ComputedDiff(ghost: ghostText, refused: byteCount))) }
        let text = JSONValue.compactCreationDiff(ofCompactText: compact)
        return .success((compact, text.map { ComputedDiff(ghost: ghostText, diff: nil, text: $0) }))
    }

    /// Inside a transaction about to read the value of `bucket`'s entities `keys` (nil: all of
    /// them) or write their files from it: parses first the saves among them left for later.
    /// Returns the changes that made ready to send.
    func parseFirst(keys: @autoclosure () -> [String]?, bucket: BucketRow, _ db: Database) throws -> [OutgoingChange] {
        guard mayHaveUnparsed.withLock({ $0 }) else { return [] }
        // Their keys first: a row holds a note of several MiB, read only if it is one of these.
        let waiting = try Row.fetchAll(
            db.cachedStatement(sql: "SELECT id, key FROM entity WHERE bucket_id = ? AND unparsed != 0"), arguments: [bucket.id])
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
    static func parseSaved(_ bytes: [UInt8], in format: any EntityFileFormat, at time: StoreTime) -> Result<JSONObject, EntityFileFormatError> {
        format.parse(bytes, base: nil, replacingFile: true, at: time)
    }

    /// `parseFirst` for a row the caller holds: parses its bytes if they wait, and writes it.
    static func parseNow(_ row: inout EntityRow, bucket: BucketRow, _ db: Database) throws -> OutgoingChange? {
        guard row.unparsed, let bytes = try row.content(db) else { return nil }
        let parsed = parseSaved(bytes, in: bucket.format, at: row.ctime)
        row.unparsed = false
        return try settle(&row, parsed: parsed, isNew: false, bucket: bucket, db).readyToSend
    }
}
