/// Substring search and common-affix measures on UTF-16 code units (the reference's
/// `indexOf`, `lastIndexOf`, `diff_commonPrefix`, `diff_commonSuffix`, `diff_commonOverlap_`).
enum UnitSearch {
    /// JavaScript `text.indexOf(pattern, from)`: first offset >= `from`, or nil.
    static func indexOf<A: RandomAccessCollection<UInt16>, B: RandomAccessCollection<UInt16>>(
        _ text: A, _ pattern: B, from: Int = 0
    ) -> Int? {
        withBuffers(text, pattern) { indexOf($0, $1, from: from) }
    }

    /// JavaScript `text.lastIndexOf(pattern, from)`: last offset <= `from`, or nil.
    static func lastIndexOf(_ text: [UInt16], _ pattern: [UInt16], from: Int) -> Int? {
        withBuffers(text, pattern) { lastIndexOf($0, $1, from: from) }
    }

    private static func withBuffers<A: Collection<UInt16>, B: Collection<UInt16>, R>(
        _ a: A, _ b: B, _ body: (UnsafeBufferPointer<UInt16>, UnsafeBufferPointer<UInt16>) -> R
    ) -> R {
        // Arrays and slices always have contiguous storage; the copies are a fallback.
        let result = a.withContiguousStorageIfAvailable { bufferA in
            b.withContiguousStorageIfAvailable { bufferB in body(bufferA, bufferB) }
        }
        if let result, let result { return result }
        return Array(a).withUnsafeBufferPointer { bufferA in
            Array(b).withUnsafeBufferPointer { bufferB in body(bufferA, bufferB) }
        }
    }

    // Horspool searches: bad-character skips keyed by the low byte of the unit. The patch
    // context search runs over the whole text for every hunk, so this is on the hot path.

    private static func indexOf(
        _ text: UnsafeBufferPointer<UInt16>, _ pattern: UnsafeBufferPointer<UInt16>, from: Int
    ) -> Int? {
        let start = max(from, 0)
        let m = pattern.count
        if m == 0 { return min(start, text.count) }
        let last = text.count - m
        guard start <= last else { return nil }
        if m == 1 {
            let unit = pattern[0]
            var i = start
            while i <= last {
                if text[i] == unit { return i }
                i += 1
            }
            return nil
        }
        // The skip table lives on the stack: half-match searches call this many times.
        return withUnsafeTemporaryAllocation(of: Int.self, capacity: 256) { skip in
            skip.initialize(repeating: m)
            for j in 0..<(m - 1) { skip[Int(pattern[j] & 0xFF)] = m - 1 - j }
            let lastUnit = pattern[m - 1]
            var i = start
            while i <= last {
                let unit = text[i + m - 1]
                if unit == lastUnit && text[i] == pattern[0] && matches(text, at: i, pattern) { return i }
                i += skip[Int(unit & 0xFF)]
            }
            return nil
        }
    }

    private static func lastIndexOf(
        _ text: UnsafeBufferPointer<UInt16>, _ pattern: UnsafeBufferPointer<UInt16>, from: Int
    ) -> Int? {
        let m = pattern.count
        var i = min(max(from, 0), text.count - m)
        if m == 0 { return i }
        return withUnsafeTemporaryAllocation(of: Int.self, capacity: 256) { skip in
            skip.initialize(repeating: m)
            for j in stride(from: m - 1, to: 0, by: -1) { skip[Int(pattern[j] & 0xFF)] = j }
            let firstUnit = pattern[0]
            while i >= 0 {
                let unit = text[i]
                if unit == firstUnit && matches(text, at: i, pattern) { return i }
                i -= skip[Int(unit & 0xFF)]
            }
            return nil
        }
    }

    @inline(__always)
    private static func matches(_ text: UnsafeBufferPointer<UInt16>, at offset: Int, _ pattern: UnsafeBufferPointer<UInt16>) -> Bool {
        var j = 1
        while j < pattern.count {
            if text[offset + j] != pattern[j] { return false }
            j += 1
        }
        return true
    }

    /// Number of leading code units the two texts share.
    static func commonPrefix<A: RandomAccessCollection<UInt16>, B: RandomAccessCollection<UInt16>>(
        _ a: A, _ b: B
    ) -> Int where A.Index == Int, B.Index == Int {
        let n = min(a.count, b.count)
        let a0 = a.startIndex
        let b0 = b.startIndex
        var i = 0
        while i < n, a[a0 + i] == b[b0 + i] { i += 1 }
        return i
    }

    /// Number of trailing code units the two texts share.
    static func commonSuffix<A: RandomAccessCollection<UInt16>, B: RandomAccessCollection<UInt16>>(
        _ a: A, _ b: B
    ) -> Int where A.Index == Int, B.Index == Int {
        let n = min(a.count, b.count)
        let aEnd = a.endIndex
        let bEnd = b.endIndex
        var i = 0
        while i < n, a[aEnd - 1 - i] == b[bEnd - 1 - i] { i += 1 }
        return i
    }

    /// Length of the longest suffix of `a` that is a prefix of `b`.
    static func commonOverlap(_ a: [UInt16], _ b: [UInt16]) -> Int {
        let length1 = a.count
        let length2 = b.count
        if length1 == 0 || length2 == 0 { return 0 }
        let textLength = min(length1, length2)
        let text1 = a[(length1 - textLength)...]
        let text2 = b[..<textLength]
        if text1.elementsEqual(text2) { return textLength }
        // Start with a single-unit match and grow it (Neil Fraser, "overlap" performance notes).
        var best = 0
        var length = 1
        while length <= textLength {
            let pattern = text1[(text1.endIndex - length)...]
            guard let found = indexOf(text2, pattern) else { return best }
            length += found
            if found == 0 || text1[(text1.endIndex - length)...].elementsEqual(text2[..<length]) {
                best = length
                length += 1
            }
        }
        return best
    }
}
