/// The textual patch format (`patch_toText` / `patch_fromText`): a `@@ -a,b +c,d @@` header
/// per hunk, then one line per diff prefixed by `-`, `+` or space, URI-escaped like the deltas.
enum PatchText {
    static func render(_ patch: Patch) -> String {
        var text = "@@ -\(coordinates(patch.start1, patch.length1)) +\(coordinates(patch.start2, patch.length2)) @@\n"
        for diff in patch.diffs {
            switch diff.operation {
            case .insert: text += "+"
            case .delete: text += "-"
            case .equal: text += " "
            }
            text += URIEscaping.encode(diff.text) + "\n"
        }
        return text
    }

    /// GNU diff's convention: 1-based start, length omitted when 1, start as-is when empty.
    private static func coordinates(_ start: Int, _ length: Int) -> String {
        switch length {
        case 0: "\(start),0"
        case 1: "\(start + 1)"
        default: "\(start + 1),\(length)"
        }
    }

    static func parse(_ text: String) throws(DiffMatchPatchError) -> [Patch] {
        var patches: [Patch] = []
        if text.isEmpty { return patches }
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
        var pointer = 0
        while pointer < lines.count {
            let header = lines[pointer]
            guard let (start1, length1, start2, length2) = parseHeader(header) else {
                throw .invalidPatchText("Invalid patch string: \(header)")
            }
            var patch = Patch(start1: start1, start2: start2, length1: length1, length2: length2)
            var units: [UnitDiff] = []
            pointer += 1
            lineLoop: while pointer < lines.count {
                let line = lines[pointer]
                guard let sign = line.first else {
                    // Blank line (the one after the final newline): skip, as the reference does.
                    pointer += 1
                    continue
                }
                if sign == "@" { break lineLoop }
                let operation: DiffOperation
                switch sign {
                case "-": operation = .delete
                case "+": operation = .insert
                case " ": operation = .equal
                default: throw .invalidPatchText("Invalid patch mode '\(sign)' in: \(line)")
                }
                guard let decoded = URIEscaping.decode(String(line.dropFirst())) else {
                    throw .invalidPatchText("Illegal escape in patch text: \(line)")
                }
                units.append(UnitDiff(operation, decoded))
                pointer += 1
            }
            patch.diffs = keepingSurrogatePairsWhole(units).map(\.diff)
            patches.append(patch)
        }
        return patches
    }

    /// `^@@ -(\d+),?(\d*) \+(\d+),?(\d*) @@$`, turned into 0-based starts and lengths.
    private static func parseHeader(_ line: Substring) -> (Int, Int, Int, Int)? {
        guard line.hasPrefix("@@ -"), line.hasSuffix(" @@"), line.count >= 10 else { return nil }
        let body = line.dropFirst(4).dropLast(3)
        let halves = body.split(separator: " ", omittingEmptySubsequences: false)
        guard halves.count == 2, halves[1].first == "+" else { return nil }
        guard let (start1, length1) = parseRange(halves[0]),
              let (start2, length2) = parseRange(halves[1].dropFirst())
        else { return nil }
        return (start1, length1, start2, length2)
    }

    private static func parseRange(_ text: Substring) -> (start: Int, length: Int)? {
        let parts = text.split(separator: ",", omittingEmptySubsequences: false)
        guard (1...2).contains(parts.count), let start = decimal(parts[0]) else { return nil }
        let lengthText = parts.count == 2 ? parts[1] : ""
        if lengthText.isEmpty {
            guard start >= 1 else { return nil }
            return (start - 1, 1)
        }
        guard let length = decimal(lengthText) else { return nil }
        if length == 0 { return (start, 0) }
        guard start >= 1 else { return nil }
        return (start - 1, length)
    }

    private static func decimal(_ text: Substring) -> Int? {
        guard !text.isEmpty, text.utf8.allSatisfy({ (0x30...0x39).contains($0) }) else { return nil }
        return Int(text)
    }
}
