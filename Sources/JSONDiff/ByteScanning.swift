/// Word-at-a-time scanning of JSON string contents: strings are most of a note's bytes, and
/// most of their bytes need neither escaping nor unescaping.
enum ByteScanning {
    private static let ones: UInt64 = 0x0101_0101_0101_0101
    private static let highBits: UInt64 = 0x8080_8080_8080_8080

    /// Whether any of the 8 bytes is a quote, a backslash or a control character (< 0x20).
    /// Exact (the classic "has zero byte" / "has byte less than" bit tricks as booleans).
    @inline(__always)
    static func needsAttention(_ word: UInt64) -> Bool {
        let quote = word ^ (ones &* 0x22)
        let backslash = word ^ (ones &* 0x5C)
        let hasQuote = (quote &- ones) & ~quote
        let hasBackslash = (backslash &- ones) & ~backslash
        let hasControl = (word &- ones &* 0x20) & ~word
        return (hasQuote | hasBackslash | hasControl) & highBits != 0
    }

    /// The first offset at or after `start` whose 8-byte word needs attention, stepping by whole
    /// words; the caller continues byte by byte from there.
    @inline(__always)
    static func skipPlainWords(_ bytes: UnsafeBufferPointer<UInt8>, from start: Int) -> Int {
        guard let base = bytes.baseAddress else { return start }
        var position = start
        while position + 8 <= bytes.count {
            let word = UnsafeRawPointer(base + position).loadUnaligned(as: UInt64.self)
            if needsAttention(word) { break }
            position += 8
        }
        return position
    }

    /// The offset after the JSON string whose opening quote is at `start`: the first quote no
    /// backslash escapes. Nil if the text ends first.
    static func endOfString(_ bytes: UnsafeBufferPointer<UInt8>, openingAt start: Int) -> Int? {
        var index = start + 1
        while true {
            index = skipPlainWords(bytes, from: index)
            guard index < bytes.count else { return nil }
            switch bytes[index] {
            case UInt8(ascii: "\""): return index + 1
            case UInt8(ascii: "\\"): index += 2
            default: index += 1
            }
        }
    }

    /// A key's first eight UTF-8 bytes as one number (zero-padded): numbers in this order are
    /// the keys' code point order wherever they differ (`JSONWriter.forEachSortedMember`).
    static func orderPrefix(_ bytes: UnsafeBufferPointer<UInt8>) -> UInt64 {
        var value: UInt64 = 0
        for position in 0..<8 { value = value << 8 | UInt64(position < bytes.count ? bytes[position] : 0) }
        return value
    }

    /// Whether every byte is below 0x80.
    static func isASCII(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        guard let base = bytes.baseAddress else { return true }
        var position = 0
        var high: UInt64 = 0
        while position + 8 <= bytes.count {
            high |= UnsafeRawPointer(base + position).loadUnaligned(as: UInt64.self)
            position += 8
        }
        var tail: UInt8 = 0
        while position < bytes.count {
            tail |= bytes[position]
            position += 1
        }
        return high & highBits == 0 && tail < 0x80
    }
}
