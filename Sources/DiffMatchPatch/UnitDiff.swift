/// A diff run over UTF-16 code units: the working form of every algorithm here, as in the
/// JavaScript reference, whose strings are UTF-16 and whose counts the wire format uses.
struct UnitDiff: Hashable, Sendable {
    var operation: DiffOperation
    var text: [UInt16]

    init(_ operation: DiffOperation, _ text: [UInt16]) {
        self.operation = operation
        self.text = text
    }

    init(_ diff: Diff) {
        self.operation = diff.operation
        self.text = utf16Units(diff.text)
    }

    var diff: Diff {
        Diff(operation, makeString(text))
    }
}

/// Builds a String from UTF-16 code units by transcoding straight to UTF-8, several times
/// faster than `String(decoding:as: UTF16.self)`. Lone surrogates (only possible from lenient
/// delta decoding) become U+FFFD, one unit each, so UTF-16 lengths are kept.
func makeString<C: Collection<UInt16>>(_ units: C) -> String {
    let count = units.count
    if count == 0 { return "" }
    return String(unsafeUninitializedCapacity: count * 3) { output in
        transcodeToUTF8(units, into: output)
    }
}

/// The UTF-8 bytes `makeString(units)` holds.
func utf8Bytes(_ units: [UInt16]) -> [UInt8] {
    [UInt8](unsafeUninitializedCapacity: units.count * 3) { output, written in
        written = transcodeToUTF8(units, into: output)
    }
}

/// Writes the UTF-8 form of `units` (lone surrogates as U+FFFD) into `output`, which must hold
/// three bytes per unit; returns the byte count.
private func transcodeToUTF8<C: Collection<UInt16>>(_ units: C, into output: UnsafeMutableBufferPointer<UInt8>) -> Int {
    var written = 0
    var iterator = units.makeIterator()
    var pending = iterator.next()
    while let unit = pending {
        pending = iterator.next()
        var scalar = UInt32(unit)
        if unit < 0x80 {
            output[written] = UInt8(truncatingIfNeeded: unit)
            written += 1
            continue
        }
        if unit.isHighSurrogate, let low = pending, low.isLowSurrogate {
            pending = iterator.next()
            scalar = 0x10000 + ((UInt32(unit) - 0xD800) << 10) + (UInt32(low) - 0xDC00)
        } else if unit & 0xF800 == 0xD800 {
            scalar = 0xFFFD
        }
        if scalar < 0x800 {
            output[written] = UInt8(0xC0 | (scalar >> 6))
            output[written + 1] = UInt8(0x80 | (scalar & 0x3F))
            written += 2
        } else if scalar < 0x10000 {
            output[written] = UInt8(0xE0 | (scalar >> 12))
            output[written + 1] = UInt8(0x80 | ((scalar >> 6) & 0x3F))
            output[written + 2] = UInt8(0x80 | (scalar & 0x3F))
            written += 3
        } else {
            output[written] = UInt8(0xF0 | (scalar >> 18))
            output[written + 1] = UInt8(0x80 | ((scalar >> 12) & 0x3F))
            output[written + 2] = UInt8(0x80 | ((scalar >> 6) & 0x3F))
            output[written + 3] = UInt8(0x80 | (scalar & 0x3F))
            written += 4
        }
    }
    return written
}

extension UInt16 {
    var isHighSurrogate: Bool { self & 0xFC00 == 0xD800 }
    var isLowSurrogate: Bool { self & 0xFC00 == 0xDC00 }
}

/// The offset of the first surrogate in `units` that is not half of a pair, if any.
func firstUnpairedSurrogate(_ units: [UInt16]) -> Int? {
    var index = 0
    while index < units.count {
        let unit = units[index]
        if unit.isHighSurrogate {
            guard index + 1 < units.count, units[index + 1].isLowSurrogate else { return index }
            index += 2
            continue
        }
        if unit.isLowSurrogate { return index }
        index += 1
    }
    return nil
}

extension Array where Element == UInt16 {
    /// JavaScript `substring(start, end)`: clamps to the bounds and swaps reversed ends.
    func jsSubstring(_ start: Int, _ end: Int? = nil) -> [UInt16] {
        let rawEnd = end ?? count
        var from = Swift.min(Swift.max(start, 0), count)
        var to = Swift.min(Swift.max(rawEnd, 0), count)
        if from > to { swap(&from, &to) }
        return Array(self[from..<to])
    }

    /// Moves `index` back one unit if it would cut a surrogate pair.
    func pairSafeStart(_ index: Int) -> Int {
        let clamped = Swift.min(Swift.max(index, 0), count)
        if clamped > 0, clamped < count, self[clamped].isLowSurrogate, self[clamped - 1].isHighSurrogate {
            return clamped - 1
        }
        return clamped
    }

    /// Moves `index` forward one unit if it would cut a surrogate pair.
    func pairSafeEnd(_ index: Int) -> Int {
        let clamped = Swift.min(Swift.max(index, 0), count)
        if clamped > 0, clamped < count, self[clamped].isLowSurrogate, self[clamped - 1].isHighSurrogate {
            return clamped + 1
        }
        return clamped
    }
}

func unitDiffs(_ diffs: [Diff]) -> [UnitDiff] {
    diffs.map(UnitDiff.init)
}

func sourceUnits(of diffs: [UnitDiff]) -> [UInt16] {
    var result: [UInt16] = []
    for diff in diffs where diff.operation != .insert { result += diff.text }
    return result
}

func destinationUnits(of diffs: [UnitDiff]) -> [UInt16] {
    var result: [UInt16] = []
    for diff in diffs where diff.operation != .delete { result += diff.text }
    return result
}
