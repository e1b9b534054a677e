/// The delta form of a diff (`diff_toDelta` / `diff_fromDelta`): tab-separated `=N` (keep),
/// `-N` (delete) and `+text` (insert) tokens, N in UTF-16 code units, text URI-escaped.
enum Delta {
    static func encode(_ diffs: [Diff]) -> String {
        var output: [UInt8] = []
        output.reserveCapacity(diffs.count * 8)
        // Empty runs are skipped, as the reference's later versions do (`-0` carries nothing).
        for diff in diffs where !diff.text.isEmpty {
            if !output.isEmpty { output.append(UInt8(ascii: "\t")) }
            switch diff.operation {
            case .insert:
                output.append(UInt8(ascii: "+"))
                URIEscaping.encode(diff.text.utf8, into: &output)
            case .delete: appendCount(UInt8(ascii: "-"), utf16Count(diff.text), to: &output)
            case .equal: appendCount(UInt8(ascii: "="), utf16Count(diff.text), to: &output)
            }
        }
        return String(decoding: output, as: UTF8.self)
    }

    /// The same text as `encode(diffs.map(\.diff))`, straight from code units.
    static func encode(_ diffs: [UnitDiff]) -> String {
        var output: [UInt8] = []
        output.reserveCapacity(diffs.count * 8)
        for diff in diffs where !diff.text.isEmpty {
            if !output.isEmpty { output.append(UInt8(ascii: "\t")) }
            switch diff.operation {
            case .insert:
                output.append(UInt8(ascii: "+"))
                URIEscaping.encode(utf8Bytes(diff.text), into: &output)
            case .delete: appendCount(UInt8(ascii: "-"), diff.text.count, to: &output)
            case .equal: appendCount(UInt8(ascii: "="), diff.text.count, to: &output)
            }
        }
        return String(decoding: output, as: UTF8.self)
    }

    private static func appendCount(_ operation: UInt8, _ count: Int, to output: inout [UInt8]) {
        output.append(operation)
        var digits: (UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8,
                     UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8) =
            (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        var length = 0
        var rest = count
        withUnsafeMutableBytes(of: &digits) { buffer in
            repeat {
                buffer[length] = UInt8(ascii: "0") + UInt8(truncatingIfNeeded: rest % 10)
                rest /= 10
                length += 1
            } while rest > 0
            for index in stride(from: length - 1, through: 0, by: -1) { output.append(buffer[index]) }
        }
    }

    /// One token of a delta, as the decoder meets it.
    enum Token {
        case keep(Range<Int>)
        case delete(Range<Int>)
        case insert([UInt16])
    }

    static func decode(_ text1: [UInt16], _ delta: String) throws(DiffMatchPatchError) -> [UnitDiff] {
        var diffs: [UnitDiff] = []
        try scan(sourceCount: text1.count, delta) { token in
            switch token {
            case .keep(let range): diffs.append(UnitDiff(.equal, Array(text1[range])))
            case .delete(let range): diffs.append(UnitDiff(.delete, Array(text1[range])))
            case .insert(let units): diffs.append(UnitDiff(.insert, units))
            }
        }
        return diffs
    }

    /// Visits the tokens of `delta` against a source of `sourceCount` units; throws the first
    /// malformed token's error, or a length mismatch at the end. Ranges past the source's end are
    /// not visited (the mismatch is thrown once the whole delta has been checked).
    static func scan(
        sourceCount: Int, _ delta: String, _ visit: (Token) -> Void
    ) throws(DiffMatchPatchError) {
        var delta = delta
        guard let total = delta.withUTF8({ bytes in scanBytes(sourceCount: sourceCount, bytes, visit) }) else {
            // Something unusual (a non-ASCII byte where the token's first Character is decided,
            // a bad number or escape): the Character-based reading gives the exact error, or
            // the tokens, as it always has.
            return try scanCharacters(sourceCount: sourceCount, delta, visit)
        }
        if total != sourceCount {
            throw .deltaLengthMismatch(expected: sourceCount, actual: total)
        }
    }

    /// The common case on UTF-8 bytes: the total of the `=`/`-` counts, or nil, before visiting
    /// anything, when the delta needs the Character-based reading.
    private static func scanBytes(
        sourceCount: Int, _ bytes: UnsafeBufferPointer<UInt8>, _ visit: (Token) -> Void
    ) -> Int? {
        // Validate first so that a delta is visited either wholly here or wholly by the fallback.
        var tokens: [(start: Int, end: Int)] = []
        var pointer = 0
        var start = 0
        let count = bytes.count
        while start <= count {
            var end = start
            while end < count, bytes[end] != UInt8(ascii: "\t") { end += 1 }
            if end > start {
                let operation = bytes[start]
                // An ASCII byte after the operation keeps it a Character of its own.
                if end > start + 1, bytes[start + 1] >= 0x80 { return nil }
                switch operation {
                case UInt8(ascii: "+"):
                    break
                case UInt8(ascii: "-"), UInt8(ascii: "="):
                    guard end > start + 1, end - start - 1 <= 18 else { return nil }
                    var number = 0
                    for index in (start + 1)..<end {
                        let digit = bytes[index] &- UInt8(ascii: "0")
                        guard digit <= 9 else { return nil }
                        number = number * 10 + Int(digit)
                    }
                    let (sum, overflow) = pointer.addingReportingOverflow(number)
                    guard !overflow else { return nil }
                    pointer = sum
                default:
                    return nil
                }
                tokens.append((start, end))
            }
            start = end + 1
        }
        var decodedInserts: [[UInt16]] = []
        for token in tokens where bytes[token.start] == UInt8(ascii: "+") {
            let escaped = UnsafeBufferPointer(rebasing: bytes[(token.start + 1)..<token.end])
            guard let units = URIEscaping.decode(escaped) else { return nil }
            decodedInserts.append(units)
        }

        pointer = 0
        var insertIndex = 0
        var overrun = false
        for token in tokens {
            let operation = bytes[token.start]
            if operation == UInt8(ascii: "+") {
                visit(.insert(decodedInserts[insertIndex]))
                insertIndex += 1
                continue
            }
            var number = 0
            for index in (token.start + 1)..<token.end { number = number * 10 + Int(bytes[index] &- UInt8(ascii: "0")) }
            let end = pointer + number
            if end > sourceCount { overrun = true }
            if !overrun {
                visit(operation == UInt8(ascii: "=") ? .keep(pointer..<end) : .delete(pointer..<end))
            }
            pointer = end
        }
        return pointer
    }

    /// The reference reading, token by Character-split token.
    private static func scanCharacters(
        sourceCount: Int, _ delta: String, _ visit: (Token) -> Void
    ) throws(DiffMatchPatchError) {
        var pointer = 0
        var overrun = false
        for token in delta.split(separator: "\t", omittingEmptySubsequences: true) {
            // Blank tokens are fine (a trailing tab), as in the reference.
            guard let operation = token.first else { continue }
            let parameter = token.dropFirst()
            switch operation {
            case "+":
                guard let inserted = URIEscaping.decode(String(parameter)) else {
                    throw .invalidDelta("Illegal escape in delta: \(token)")
                }
                visit(.insert(inserted))
            case "-", "=":
                guard !parameter.isEmpty, parameter.utf8.allSatisfy({ (0x30...0x39).contains($0) }),
                      let count = Int(parameter) else {
                    throw .invalidDelta("Invalid number in delta: \(token)")
                }
                let (end, overflow) = pointer.addingReportingOverflow(count)
                guard !overflow else { throw .invalidDelta("Invalid number in delta: \(token)") }
                if end > sourceCount { overrun = true }
                if !overrun {
                    visit(operation == "=" ? .keep(pointer..<end) : .delete(pointer..<end))
                }
                pointer = end
            default:
                throw .invalidDelta("Invalid diff operation in delta: \(operation)")
            }
        }
        if overrun || pointer != sourceCount {
            throw .deltaLengthMismatch(expected: sourceCount, actual: pointer)
        }
    }
}
