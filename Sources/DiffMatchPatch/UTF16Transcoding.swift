/// String to UTF-16 code units straight from the string's UTF-8 storage. `Array(string.utf16)`
/// and `string.utf16.count` go through the UTF-16 view's index translation (breadcrumbs) for
/// non-ASCII text, which dominated the cost of diffing and applying deltas.

/// The UTF-16 code units of `string` (what JavaScript's string indexes count).
func utf16Units(_ string: String) -> [UInt16] {
    var string = string
    return string.withUTF8 { bytes in utf16Units(fromValidUTF8: bytes) }
}

/// The UTF-16 code units of valid UTF-8 (a truncated final sequence is dropped).
func utf16Units(fromValidUTF8 bytes: UnsafeBufferPointer<UInt8>) -> [UInt16] {
    let count = bytes.count
    if count == 0 { return [] }
    // A UTF-16 text never has more code units than its UTF-8 form has bytes.
    return [UInt16](unsafeUninitializedCapacity: count) { output, written in
        var index = 0
        var unitCount = 0
        while index < count {
            if index + 8 <= count, isASCIIWord(bytes, at: index) {
                for offset in 0..<8 { output[unitCount + offset] = UInt16(bytes[index + offset]) }
                unitCount += 8
                index += 8
                continue
            }
            let lead = bytes[index]
            if lead < 0x80 {
                output[unitCount] = UInt16(lead)
                unitCount += 1
                index += 1
            } else if lead < 0xE0 {
                guard index + 1 < count else { break }
                output[unitCount] = UInt16(lead & 0x1F) << 6 | UInt16(bytes[index + 1] & 0x3F)
                unitCount += 1
                index += 2
            } else if lead < 0xF0 {
                guard index + 2 < count else { break }
                output[unitCount] = UInt16(lead & 0x0F) << 12 | UInt16(bytes[index + 1] & 0x3F) << 6
                    | UInt16(bytes[index + 2] & 0x3F)
                unitCount += 1
                index += 3
            } else {
                guard index + 3 < count else { break }
                let scalar = UInt32(lead & 0x07) << 18 | UInt32(bytes[index + 1] & 0x3F) << 12
                    | UInt32(bytes[index + 2] & 0x3F) << 6 | UInt32(bytes[index + 3] & 0x3F)
                let offset = scalar &- 0x10000
                output[unitCount] = UInt16(truncatingIfNeeded: 0xD800 + (offset >> 10))
                output[unitCount + 1] = UInt16(truncatingIfNeeded: 0xDC00 + (offset & 0x3FF))
                unitCount += 2
                index += 4
            }
        }
        written = unitCount
    }
}

/// `string.utf16.count`, counted from the UTF-8 bytes: one unit per scalar, two for astral ones.
func utf16Count(_ string: String) -> Int {
    var string = string
    return string.withUTF8 { bytes in utf16Count(bytes) }
}

/// The UTF-16 length of valid UTF-8.
func utf16Count(_ bytes: UnsafeBufferPointer<UInt8>) -> Int {
    var count = 0
    var position = 0
    if let base = bytes.baseAddress {
        // A word at a time: bit 7 of each byte marks continuation bytes (10xxxxxx) and 4-byte
        // leads (11110xxx) after the shifts line bits 6, 5 and 4 up under it.
        let highBits: UInt64 = 0x8080_8080_8080_8080
        while position + 8 <= bytes.count {
            let word = UnsafeRawPointer(base + position).loadUnaligned(as: UInt64.self)
            let continuations = (word & ~(word << 1) & highBits).nonzeroBitCount
            let fourByteLeads = (word & (word << 1) & (word << 2) & (word << 3) & highBits).nonzeroBitCount
            count &+= 8 &- continuations &+ fourByteLeads
            position += 8
        }
    }
    for byte in UnsafeBufferPointer(rebasing: bytes[position...]) {
        // Every byte but a continuation byte starts a scalar; a 4-byte lead adds a second unit.
        count &+= (byte & 0xC0 != 0x80 ? 1 : 0) &+ (byte >= 0xF0 ? 1 : 0)
    }
    return count
}

/// Whether the 8 bytes at `offset` (which must be in bounds) are all ASCII.
@inline(__always)
func isASCIIWord(_ bytes: UnsafeBufferPointer<UInt8>, at offset: Int) -> Bool {
    guard let base = bytes.baseAddress else { return false }
    return UnsafeRawPointer(base + offset).loadUnaligned(as: UInt64.self) & 0x8080_8080_8080_8080 == 0
}

/// The byte offset `units` UTF-16 code units after byte offset `start` of valid UTF-8; nil when
/// that point falls between the halves of a surrogate pair or past the end.
func utf8Offset(advancing units: Int, from start: Int, in bytes: UnsafeBufferPointer<UInt8>) -> Int? {
    let count = bytes.count
    var index = start
    var remaining = units
    while remaining > 0 {
        if remaining >= 8, index + 8 <= count, isASCIIWord(bytes, at: index) {
            index += 8
            remaining -= 8
            continue
        }
        guard index < count else { return nil }
        let lead = bytes[index]
        if lead < 0x80 {
            index += 1
        } else if lead < 0xE0 {
            index += 2
        } else if lead < 0xF0 {
            index += 3
        } else {
            guard remaining >= 2 else { return nil }
            index += 4
            remaining -= 1
        }
        remaining -= 1
    }
    return index <= count ? index : nil
}
