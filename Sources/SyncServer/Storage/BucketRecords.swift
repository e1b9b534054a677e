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
}

/// The answer to `cv:<cv>`.
enum CatchUp: Sendable, Hashable {
    /// The cv is unknown or compacted away: the client must reload the index (`cv:?`).
    case unknown
    /// Every change after the cv, in order (empty when up to date).
    case changes([StoredChange])
}

extension StoredChange {
    /// The wire form of this change (spec "Change: c"; DESIGN: `ccids` always, `sv` on non-creates).
    var applied: AppliedChange {
        AppliedChange(
            clientID: clientID, id: key, operation: operation, diff: diff,
            endVersion: endVersion, sourceVersion: sourceVersion,
            changeVersion: ChangeSequence.render(cv), ccids: [ccid]
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
