/// A view of code units: the diff recursion works on views into the two top-level texts (no
/// copies of the sub-problems); only the runs of the result become arrays.
typealias UnitBuffer = UnsafeBufferPointer<UInt16>

extension UnsafeBufferPointer where Element == UInt16 {
    /// The units in `range`, as a view indexed from 0.
    @inline(__always)
    func units(_ range: Range<Int>) -> UnitBuffer { UnitBuffer(rebasing: self[range]) }

    @inline(__always)
    func units(from start: Int) -> UnitBuffer { units(start..<count) }

    @inline(__always)
    func units(upTo end: Int) -> UnitBuffer { units(0..<end) }
}

/// `diff_main` and its strategies, on UTF-16 code units, following the JavaScript reference step
/// by step so that results (and thus deltas) match it for the same input.
extension DiffMatchPatch {
    func diffMainUnits(
        _ text1: [UInt16], _ text2: [UInt16], checkLines: Bool, deadline: ContinuousClock.Instant?
    ) -> [UnitDiff] {
        text1.withUnsafeBufferPointer { a in
            text2.withUnsafeBufferPointer { b in diffMain(a, b, checkLines: checkLines, deadline: deadline) }
        }
    }

    func diffMain(
        _ text1: UnitBuffer, _ text2: UnitBuffer, checkLines: Bool, deadline: ContinuousClock.Instant?
    ) -> [UnitDiff] {
        if text1.count == text2.count && text1.elementsEqual(text2) {
            return text1.isEmpty ? [] : [UnitDiff(.equal, Array(text1))]
        }
        let prefixLength = UnitSearch.commonPrefix(text1, text2)
        let rest1 = text1.units(from: prefixLength)
        let rest2 = text2.units(from: prefixLength)
        let suffixLength = UnitSearch.commonSuffix(rest1, rest2)
        let middle1 = rest1.units(upTo: rest1.count - suffixLength)
        let middle2 = rest2.units(upTo: rest2.count - suffixLength)

        var diffs = compute(middle1, middle2, checkLines: checkLines, deadline: deadline)
        if prefixLength > 0 { diffs.insert(UnitDiff(.equal, Array(text1.units(upTo: prefixLength))), at: 0) }
        if suffixLength > 0 { diffs.append(UnitDiff(.equal, Array(rest1.units(from: middle1.count)))) }
        cleanupMerge(&diffs)
        return diffs
    }

    /// Diff of two texts known to have no common prefix or suffix.
    func compute(
        _ text1: UnitBuffer, _ text2: UnitBuffer, checkLines: Bool, deadline: ContinuousClock.Instant?
    ) -> [UnitDiff] {
        if text1.isEmpty { return [UnitDiff(.insert, Array(text2))] }
        if text2.isEmpty { return [UnitDiff(.delete, Array(text1))] }

        let text1IsLonger = text1.count > text2.count
        let longText = text1IsLonger ? text1 : text2
        let shortText = text1IsLonger ? text2 : text1
        if let i = UnitSearch.indexOf(longText, shortText) {
            // The shorter text sits inside the longer one.
            let edge: DiffOperation = text1IsLonger ? .delete : .insert
            return [
                UnitDiff(edge, Array(longText.units(upTo: i))),
                UnitDiff(.equal, Array(shortText)),
                UnitDiff(edge, Array(longText.units(from: i + shortText.count))),
            ]
        }
        if shortText.count == 1 {
            // A single unit that is not in the other text: replace outright.
            return [UnitDiff(.delete, Array(text1)), UnitDiff(.insert, Array(text2))]
        }
        if let match = halfMatchView(text1, text2) {
            var diffs = diffMain(match.text1A, match.text2A, checkLines: checkLines, deadline: deadline)
            diffs.append(UnitDiff(.equal, Array(match.common)))
            diffs += diffMain(match.text1B, match.text2B, checkLines: checkLines, deadline: deadline)
            return diffs
        }
        if checkLines && text1.count > 100 && text2.count > 100 {
            return lineMode(Array(text1), Array(text2), deadline: deadline)
        }
        return bisect(text1, text2, deadline: deadline)
    }

    /// Quick line-level diff, then a character diff of each replaced block.
    func lineMode(_ text1: [UInt16], _ text2: [UInt16], deadline: ContinuousClock.Instant?) -> [UnitDiff] {
        let encoded = LineEncoding(text1, text2)
        var diffs = diffMainUnits(encoded.chars1, encoded.chars2, checkLines: false, deadline: deadline)
        encoded.decode(&diffs)
        cleanupSemantic(&diffs)

        // Re-diff each run of deletions and insertions character by character.
        var result: [UnitDiff] = []
        result.reserveCapacity(diffs.count)
        var pending: [UnitDiff] = []
        var countDelete = 0
        var countInsert = 0
        var textDelete: [UInt16] = []
        var textInsert: [UInt16] = []
        func flush() {
            if countDelete >= 1 && countInsert >= 1 {
                result += diffMainUnits(textDelete, textInsert, checkLines: false, deadline: deadline)
            } else {
                result += pending
            }
            pending = []
            countDelete = 0
            countInsert = 0
            textDelete = []
            textInsert = []
        }
        for diff in diffs {
            switch diff.operation {
            case .insert:
                countInsert += 1
                textInsert += diff.text
                pending.append(diff)
            case .delete:
                countDelete += 1
                textDelete += diff.text
                pending.append(diff)
            case .equal:
                flush()
                result.append(diff)
            }
        }
        flush()
        return result
    }

    /// Myers' O(ND) middle snake; splits the problem at the snake and recurses.
    func bisect(_ text1: [UInt16], _ text2: [UInt16], deadline: ContinuousClock.Instant?) -> [UnitDiff] {
        text1.withUnsafeBufferPointer { a in text2.withUnsafeBufferPointer { b in bisect(a, b, deadline: deadline) } }
    }

    func bisect(_ text1: UnitBuffer, _ text2: UnitBuffer, deadline: ContinuousClock.Instant?) -> [UnitDiff] {
        let split = Self.middleSnake(text1, text2, deadline: deadline)
        guard let (x, y) = split else {
            // Out of time or no commonality at all.
            return [UnitDiff(.delete, Array(text1)), UnitDiff(.insert, Array(text2))]
        }
        var diffs = diffMain(text1.units(upTo: x), text2.units(upTo: y), checkLines: false, deadline: deadline)
        diffs += diffMain(text1.units(from: x), text2.units(from: y), checkLines: false, deadline: deadline)
        return diffs
    }

    /// Where the forward and reverse D-paths of Myers' algorithm first overlap, or nil when the
    /// deadline passes first. The V arrays live in one unsafe allocation: this loop is the whole
    /// cost of diffing unrelated texts, and array bounds and exclusivity checks doubled it.
    static func middleSnake(_ a: UnitBuffer, _ b: UnitBuffer, deadline: ContinuousClock.Instant?) -> (Int, Int)? {
        let length1 = a.count
        let length2 = b.count
        let maxD = (length1 + length2 + 1) / 2
        guard maxD > 0 else { return nil }
        let vOffset = maxD
        let vLength = 2 * maxD
        let storage = UnsafeMutableBufferPointer<Int>.allocate(capacity: 2 * vLength)
        defer { storage.deallocate() }
        storage.initialize(repeating: -1)
        let v1 = UnsafeMutableBufferPointer(rebasing: storage[0..<vLength])
        let v2 = UnsafeMutableBufferPointer(rebasing: storage[vLength...])
        v1[vOffset + 1] = 0
        v2[vOffset + 1] = 0
        let delta = length1 - length2
        // With an odd difference in lengths the front path collides with the reverse path.
        let front = delta % 2 != 0
        var k1start = 0, k1end = 0, k2start = 0, k2end = 0
        for d in 0..<maxD {
            if let deadline, ContinuousClock.now > deadline { return nil }
            var k1 = -d + k1start
            while k1 <= d - k1end {
                let k1Offset = vOffset + k1
                var x1: Int
                if k1 == -d || (k1 != d && v1[k1Offset - 1] < v1[k1Offset + 1]) {
                    x1 = v1[k1Offset + 1]
                } else {
                    x1 = v1[k1Offset - 1] + 1
                }
                var y1 = x1 - k1
                while x1 < length1 && y1 < length2 && a[x1] == b[y1] {
                    x1 += 1
                    y1 += 1
                }
                v1[k1Offset] = x1
                if x1 > length1 {
                    k1end += 2
                } else if y1 > length2 {
                    k1start += 2
                } else if front {
                    let k2Offset = vOffset + delta - k1
                    if k2Offset >= 0 && k2Offset < vLength && v2[k2Offset] != -1 {
                        let x2 = length1 - v2[k2Offset]
                        if x1 >= x2 { return (x1, y1) }
                    }
                }
                k1 += 2
            }
            var k2 = -d + k2start
            while k2 <= d - k2end {
                let k2Offset = vOffset + k2
                var x2: Int
                if k2 == -d || (k2 != d && v2[k2Offset - 1] < v2[k2Offset + 1]) {
                    x2 = v2[k2Offset + 1]
                } else {
                    x2 = v2[k2Offset - 1] + 1
                }
                var y2 = x2 - k2
                while x2 < length1 && y2 < length2 && a[length1 - x2 - 1] == b[length2 - y2 - 1] {
                    x2 += 1
                    y2 += 1
                }
                v2[k2Offset] = x2
                if x2 > length1 {
                    k2end += 2
                } else if y2 > length2 {
                    k2start += 2
                } else if !front {
                    let k1Offset = vOffset + delta - k2
                    if k1Offset >= 0 && k1Offset < vLength && v1[k1Offset] != -1 {
                        let x1 = v1[k1Offset]
                        let y1 = vOffset + x1 - k1Offset
                        if x1 >= length1 - x2 { return (x1, y1) }
                    }
                }
                k2 += 2
            }
        }
        return nil
    }

    struct HalfMatch {
        var text1A: [UInt16], text1B: [UInt16], text2A: [UInt16], text2B: [UInt16], common: [UInt16]
    }

    /// A common substring at least half the longer text's length, if any: splits the problem
    /// in two at the cost of a possibly non-minimal diff (skipped when there is no time limit).
    func halfMatch(_ text1: [UInt16], _ text2: [UInt16]) -> HalfMatch? {
        text1.withUnsafeBufferPointer { a in
            text2.withUnsafeBufferPointer { b in
                halfMatchView(a, b).map { match in
                    HalfMatch(text1A: Array(match.text1A), text1B: Array(match.text1B), text2A: Array(match.text2A),
                              text2B: Array(match.text2B), common: Array(match.common))
                }
            }
        }
    }

    /// `halfMatch` as views into the two texts.
    struct HalfMatchView {
        var text1A: UnitBuffer, text1B: UnitBuffer, text2A: UnitBuffer, text2B: UnitBuffer, common: UnitBuffer
    }

    func halfMatchView(_ text1: UnitBuffer, _ text2: UnitBuffer) -> HalfMatchView? {
        if diffTimeout <= 0 { return nil }
        let text1IsLonger = text1.count > text2.count
        let longText = text1IsLonger ? text1 : text2
        let shortText = text1IsLonger ? text2 : text1
        if longText.count < 4 || shortText.count * 2 < longText.count { return nil }

        let hm1 = halfMatchAt(longText, shortText, (longText.count + 3) / 4)
        let hm2 = halfMatchAt(longText, shortText, (longText.count + 1) / 2)
        let found: HalfMatchParts
        switch (hm1, hm2) {
        case (nil, nil): return nil
        case let (hm1?, nil): found = hm1
        case let (nil, hm2?): found = hm2
        case let (hm1?, hm2?): found = hm1.common.count > hm2.common.count ? hm1 : hm2
        }
        if text1IsLonger {
            return HalfMatchView(text1A: found.longPrefix, text1B: found.longSuffix, text2A: found.shortPrefix,
                             text2B: found.shortSuffix, common: found.common)
        }
        return HalfMatchView(text1A: found.shortPrefix, text1B: found.shortSuffix, text2A: found.longPrefix,
                         text2B: found.longSuffix, common: found.common)
    }

    struct HalfMatchParts {
        var longPrefix: UnitBuffer, longSuffix: UnitBuffer, shortPrefix: UnitBuffer, shortSuffix: UnitBuffer, common: UnitBuffer
    }

    /// Whether a quarter-length seed of `longText` starting at `i` grows into a half match.
    func halfMatchAt(_ longText: UnitBuffer, _ shortText: UnitBuffer, _ i: Int) -> HalfMatchParts? {
        let seed = longText.units(i..<min(i + longText.count / 4, longText.count))
        var bestCommonCount = 0
        var best: HalfMatchParts?
        var j = -1
        while let found = UnitSearch.indexOf(shortText, seed, from: j + 1) {
            j = found
            let prefixLength = UnitSearch.commonPrefix(longText.units(from: i), shortText.units(from: j))
            let suffixLength = UnitSearch.commonSuffix(longText.units(upTo: i), shortText.units(upTo: j))
            if bestCommonCount < suffixLength + prefixLength {
                bestCommonCount = suffixLength + prefixLength
                best = HalfMatchParts(
                    longPrefix: longText.units(upTo: i - suffixLength),
                    longSuffix: longText.units(from: i + prefixLength),
                    shortPrefix: shortText.units(upTo: j - suffixLength),
                    shortSuffix: shortText.units(from: j + prefixLength),
                    common: shortText.units((j - suffixLength)..<(j + prefixLength))
                )
            }
        }
        if bestCommonCount * 2 >= longText.count { return best }
        return nil
    }
}
