/// Change versions as this server makes them: 24 lowercase hex digits, so that they look like the
/// reference service's cvs, made of the database-wide change counter (12 digits, so they sort
/// like it) and a tag of the change the counter names (12 digits). The tag is what names the
/// history: a database restored from a backup counts on from the backup's counter, so after
/// enough changes the counter of a cv handed out before the restore names a different change
/// there, with a different tag. Such a cv, like one from the future or from another server, is
/// answered `cv:?` (the client re-indexes and sends again what the server lost), never taken.
/// A restored database also begins a history of its own (`ServerHistory`), whose number every
/// tag on the wire carries: a cv handed out before the restore is answered `cv:?` even when the
/// backup holds the very change it names (the client may have seen, and undone, what followed
/// it in the lost history). Tags are stored without it, so a compacted base's stays true across
/// restores. Clients keep cvs opaque.
enum ChangeSequence {
    static let counterWidth = 12
    static let tagWidth = 12
    static var width: Int { counterWidth + tagWidth }
    /// The largest counter a cv carries (2^48 - 1 changes).
    static let maxCounter: Int64 = (1 << (4 * Int64(counterWidth))) - 1

    /// The wire form of a counter value and the tag of what it names, in `history`.
    static func render(_ value: Int64, tag: UInt64, history: UInt64) -> String {
        hex(UInt64(bitPattern: value) & UInt64(maxCounter), width: counterWidth) + hex((tag ^ history) & tagMask, width: tagWidth)
    }

    /// The cv of a change: its counter and a tag of the change itself.
    static func render(_ change: StoredChange, history: UInt64) -> String {
        render(change.cv, key: change.key, ccid: change.ccid, endVersion: change.endVersion, history: history)
    }

    /// The cv of the change numbered `value` that brought `key` to `endVersion` under `ccid`.
    static func render(_ value: Int64, key: String, ccid: String, endVersion: Int, history: UInt64) -> String {
        render(value, tag: tag(key: key, ccid: ccid, endVersion: endVersion), history: history)
    }

    /// The cv of a bucket whose log holds no change after `base` (a new bucket, or one whose log
    /// was compacted): `storedTag` is the tag of the last change compaction dropped (the cv
    /// clients were handed for it), nil for a new bucket's base, tagged with the bucket so that
    /// another bucket's base is not taken for it.
    static func renderBase(_ base: Int64, storedTag: Int64?, bucketID: Int64, history: UInt64) -> String {
        render(base, tag: baseTag(base, storedTag: storedTag, bucketID: bucketID), history: history)
    }

    static func baseTag(_ base: Int64, storedTag: Int64?, bucketID: Int64) -> UInt64 {
        storedTag.map { UInt64(bitPattern: $0) } ?? baseTag(bucketID: bucketID, base: base)
    }

    /// The tag of a change: what makes it this change and not another numbered the same.
    static func tag(key: String, ccid: String, endVersion: Int) -> UInt64 {
        var hash = FNV1a()
        hash.add(key)
        hash.add(ccid)
        hash.add(String(endVersion))
        return hash.value & tagMask
    }

    static func baseTag(bucketID: Int64, base: Int64) -> UInt64 {
        var hash = FNV1a()
        hash.add("base")
        hash.add(String(bucketID))
        hash.add(String(base))
        return hash.value & tagMask
    }

    /// The counter and tag of a cv in this server's form, `history`'s number taken out of the
    /// tag, or nil for anything else (answered `cv:?`).
    static func parse(_ text: some StringProtocol, history: UInt64) -> (counter: Int64, tag: UInt64)? {
        let utf8 = text.utf8
        guard utf8.count == width,
              utf8.allSatisfy({ ($0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9")) || ($0 >= UInt8(ascii: "a") && $0 <= UInt8(ascii: "f")) })
        else { return nil }
        let counterText = text.prefix(counterWidth)
        let tagText = text.suffix(tagWidth)
        guard let counter = UInt64(counterText, radix: 16), let tag = UInt64(tagText, radix: 16) else { return nil }
        return (Int64(counter), (tag ^ history) & tagMask)
    }

    static let tagMask: UInt64 = (1 << (4 * UInt64(tagWidth))) - 1

    private static func hex(_ value: UInt64, width: Int) -> String {
        let digits = String(value, radix: 16)
        return String(repeating: "0", count: max(0, width - digits.utf8.count)) + digits
    }

    /// 64-bit FNV-1a over fields each ended by a zero byte (so "ab","c" and "a","bc" differ).
    private struct FNV1a {
        var value: UInt64 = 0xcbf2_9ce4_8422_2325
        mutating func add(_ field: String) {
            for byte in field.utf8 { mix(byte) }
            mix(0)
        }
        private mutating func mix(_ byte: UInt8) {
            value ^= UInt64(byte)
            value = value &* 0x0000_0100_0000_01b3
        }
    }
}
