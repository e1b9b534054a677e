/// The reference's `diff_linesToChars_` / `diff_charsToLines_`: each distinct line becomes one
/// code unit so that line mode can diff lines with the character algorithm.
struct LineEncoding {
    /// Line texts by code; code 0 is unused, as in the reference.
    private(set) var lines: [ArraySlice<UInt16>] = [[]]
    private var codes: [LineKey: Int] = [:]
    private(set) var chars1: [UInt16] = []
    private(set) var chars2: [UInt16] = []

    init(_ text1: [UInt16], _ text2: [UInt16]) {
        // Same limits as the reference: text1 may use 40000 codes so text2 keeps some for itself;
        // past the limit the rest of a text becomes one "line".
        chars1 = encode(text1, maxLines: 40000)
        chars2 = encode(text2, maxLines: 65535)
    }

    private mutating func encode(_ text: [UInt16], maxLines: Int) -> [UInt16] {
        var chars: [UInt16] = []
        var lineStart = 0
        var lineEnd = -1
        let newline: UInt16 = 0x0A
        while lineEnd < text.count - 1 {
            lineEnd = text[lineStart...].firstIndex(of: newline) ?? (text.count - 1)
            var line = text[lineStart...lineEnd]
            if let code = codes[LineKey(line)] {
                chars.append(UInt16(truncatingIfNeeded: code))
            } else {
                if lines.count == maxLines {
                    line = text[lineStart...]
                    lineEnd = text.count
                }
                chars.append(UInt16(truncatingIfNeeded: lines.count))
                codes[LineKey(line)] = lines.count
                lines.append(line)
            }
            lineStart = lineEnd + 1
        }
        return chars
    }

    /// Replaces line codes in the diffs by the lines they stand for.
    func decode(_ diffs: inout [UnitDiff]) {
        for index in diffs.indices {
            var text: [UInt16] = []
            for code in diffs[index].text {
                let line = Int(code)
                if line < lines.count { text += lines[line] }
            }
            diffs[index].text = text
        }
    }
}

/// A line as a dictionary key, hashed as raw bytes (element-wise hashing of `ArraySlice`
/// dominated line mode's profile).
private struct LineKey: Hashable {
    let units: ArraySlice<UInt16>

    init(_ units: ArraySlice<UInt16>) {
        self.units = units
    }

    func hash(into hasher: inout Hasher) {
        units.withUnsafeBytes { hasher.combine(bytes: $0) }
    }

    static func == (lhs: LineKey, rhs: LineKey) -> Bool {
        lhs.units.elementsEqual(rhs.units)
    }
}
