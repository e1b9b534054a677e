/// The reference's `diff_cleanupSemanticScore_`: how good a boundary between two texts is,
/// from 6 (an edge) down to 0 (inside a word), using JavaScript's regex classes on code units.
enum SemanticScore {
    static func score<A: BidirectionalCollection<UInt16>, B: BidirectionalCollection<UInt16>>(
        _ one: A, _ two: B
    ) -> Int {
        guard let char1 = one.last, let char2 = two.first else { return 6 }
        let nonAlphaNumeric1 = !isAlphaNumeric(char1)
        let nonAlphaNumeric2 = !isAlphaNumeric(char2)
        let whitespace1 = nonAlphaNumeric1 && isWhitespace(char1)
        let whitespace2 = nonAlphaNumeric2 && isWhitespace(char2)
        let lineBreak1 = whitespace1 && isLineBreak(char1)
        let lineBreak2 = whitespace2 && isLineBreak(char2)
        let blankLine1 = lineBreak1 && endsWithBlankLine(one)
        let blankLine2 = lineBreak2 && startsWithBlankLine(two)
        if blankLine1 || blankLine2 { return 5 }
        if lineBreak1 || lineBreak2 { return 4 }
        if nonAlphaNumeric1 && !whitespace1 && whitespace2 { return 3 }
        if whitespace1 || whitespace2 { return 2 }
        if nonAlphaNumeric1 || nonAlphaNumeric2 { return 1 }
        return 0
    }

    /// `[a-zA-Z0-9]`
    static func isAlphaNumeric(_ unit: UInt16) -> Bool {
        (0x30...0x39).contains(unit) || (0x41...0x5A).contains(unit) || (0x61...0x7A).contains(unit)
    }

    /// JavaScript's `\s`.
    static func isWhitespace(_ unit: UInt16) -> Bool {
        switch unit {
        case 0x09...0x0D, 0x20, 0xA0, 0x1680, 0x2000...0x200A, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000, 0xFEFF:
            return true
        default:
            return false
        }
    }

    /// `[\r\n]`
    static func isLineBreak(_ unit: UInt16) -> Bool {
        unit == 0x0A || unit == 0x0D
    }

    /// `/\n\r?\n$/`
    static func endsWithBlankLine<C: BidirectionalCollection<UInt16>>(_ text: C) -> Bool {
        var index = text.endIndex
        guard index != text.startIndex else { return false }
        index = text.index(before: index)
        guard text[index] == 0x0A, index != text.startIndex else { return false }
        index = text.index(before: index)
        if text[index] == 0x0A { return true }
        guard text[index] == 0x0D, index != text.startIndex else { return false }
        index = text.index(before: index)
        return text[index] == 0x0A
    }

    /// `/^\r?\n\r?\n/`
    static func startsWithBlankLine<C: Collection<UInt16>>(_ text: C) -> Bool {
        var index = text.startIndex
        var newlines = 0
        while newlines < 2 {
            guard index != text.endIndex else { return false }
            if text[index] == 0x0D {
                index = text.index(after: index)
                guard index != text.endIndex else { return false }
            }
            guard text[index] == 0x0A else { return false }
            index = text.index(after: index)
            newlines += 1
        }
        return true
    }
}
