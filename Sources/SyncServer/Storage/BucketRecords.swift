import JSONDiff
import SyncProtocol

/// A user's bucket as opened by `init`; all bucket data is keyed by its id.
struct BucketHandle: Sendable, Hashable {
    var id: Int64
    var userID: Int64
    var name: String
}

/// One row of the change log: what the server broadcasts and replays for `cv`.
struct StoredChange: Sendable, Hashable {
    var cv: Int64
    var key: String
    var clientID: String
    var ccid: String
    var operation: ChangeOperation
    /// The object diff from `sourceVersion` (modify only).
    var diff: ObjectDiff?
    /// Absent for a create (spec: "sv not sent for new objects").
    var sourceVersion: Int?
    var endVersion: Int
}

/// A version of an entity the server keeps (the answer to `e:key.version`).
struct KeptVersion: Sendable, Hashable {
    var data: JSONObject
    /// Unix seconds; nil for a version stored before the server recorded acceptance times.
    var acceptedAt: Double?
    /// The ccid of the change that made this version, while the change log holds it (`e`'s
    /// `ccid`: a client's own change, or another history's version of the same number).
    var ccid: String? = nil
}

extension StoredChange {
    /// A change as a store keeps it: the operation by its wire name, the diff as JSON text.
    init(
        cv: Int64, key: String, clientID: String, ccid: String, operationText: String, diffText: String?,
        sourceVersion: Int?, endVersion: Int
    ) throws {
        guard let operation = ChangeOperation(rawValue: operationText) else {
            throw SyncServerError.corruptRecord("change operation \(operationText)")
        }
        var diff: ObjectDiff?
        if let diffText {
            do {
                diff = try JSONDiffing.decode(JSONValue(parsing: diffText))
            } catch {
                throw SyncServerError.corruptRecord("change diff: \(error)")
            }
        }
        self.init(
            cv: cv, key: key, clientID: clientID, ccid: ccid, operation: operation, diff: diff,
            sourceVersion: sourceVersion, endVersion: endVersion
        )
    }
}

/// Builds an index page from the rows a store read (one more than `limit` when another page
/// follows), the same way for every store.
enum IndexPageRows {
    struct Row: Sendable {
        var key: String
        var version: Int
        /// The entity's JSON text; nil when the page is read without data.
        var data: String?
    }

    /// - Parameter maxDataBytes: the page ends early (with a mark) once its data reach this many
    ///   bytes, so one page never outgrows the connection's outbound buffer.
    static func page(_ rows: [Row], current: String, limit: Int, maxDataBytes: Int) throws -> IndexPage {
        var entries: [IndexPage.Entry] = []
        entries.reserveCapacity(min(rows.count, limit))
        var dataBytes = 0
        var truncated = rows.count > limit
        for row in rows.prefix(limit) {
            if let dataText = row.data {
                dataBytes += dataText.utf8.count
                // Always at least one entry per page, so paging makes progress.
                if dataBytes > maxDataBytes, !entries.isEmpty {
                    truncated = true
                    break
                }
            }
            let data = try row.data.map { try ServerStore.decodeObject($0, what: "entity \(row.key)") }
            entries.append(IndexPage.Entry(id: row.key, version: row.version, data: data))
        }
        let mark = truncated ? entries.last.map { IndexCursor.encode(afterKey: $0.id) } : nil
        return IndexPage(current: current, index: entries, mark: mark)
    }
}

/// The answer to `cv:<cv>`.
enum CatchUp: Sendable, Hashable {
    /// The cv is unknown or compacted away: the client must reload the index (`cv:?`).
    case unknown
    /// Every change after the cv, in order (empty when up to date).
    case changes([StoredChange])
}

extension StoredChange {
    /// The wire form of this change in `history` (spec "Change: c"; DESIGN: `ccids` always, `sv`
    /// on non-creates).
    func applied(history: UInt64) -> AppliedChange {
        AppliedChange(
            clientID: clientID, id: key, operation: operation, diff: diff,
            endVersion: endVersion, sourceVersion: sourceVersion,
            changeVersion: ChangeSequence.render(self, history: history), ccids: [ccid]
        )
    }
}

/// The opaque `mark` of an index page: the hex of the last key's UTF-8 (keys never contain `:`,
/// but hex keeps the cursor opaque so clients do not build their own).
enum IndexCursor {
    static func encode(afterKey key: String) -> String {
        let hex = Array("0123456789abcdef".utf8)
        var bytes: [UInt8] = []
        bytes.reserveCapacity(key.utf8.count * 2)
        for byte in key.utf8 {
            bytes.append(hex[Int(byte >> 4)])
            bytes.append(hex[Int(byte & 0x0F)])
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The key a mark stands for; nil when the mark is not one this server made.
    static func decode(_ mark: String) -> String? {
        let utf8 = Array(mark.utf8)
        guard !utf8.isEmpty, utf8.count % 2 == 0, utf8.count <= 2 * EntityKey.maxLength else { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(utf8.count / 2)
        var index = 0
        while index < utf8.count {
            guard let high = nibble(utf8[index]), let low = nibble(utf8[index + 1]) else { return nil }
            bytes.append(high << 4 | low)
            index += 2
        }
        guard let key = String(validating: bytes, as: UTF8.self), EntityKey.isValid(key) else { return nil }
        return key
    }

    private static func nibble(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return byte - UInt8(ascii: "a") + 10
        default: return nil
        }
    }
}
