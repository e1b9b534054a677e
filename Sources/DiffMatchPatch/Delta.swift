/// The delta form of a diff (`diff_toDelta` / `diff_fromDelta`): tab-separated `=N` (keep),
/// `-N` (delete) and `+text` (insert) tokens, N in UTF-16 code units, text URI-escaped.
enum Delta {
    static func encode(_ diffs: [Diff]) -> String {
        var tokens: [String] = []
        tokens.reserveCapacity(diffs.count)
        // Empty runs are skipped, as the reference's later versions do (`-0` carries nothing).
        for diff in diffs where !diff.text.isEmpty {
            switch diff.operation {
            case .insert: tokens.append("+" + URIEscaping.encode(diff.text))
            case .delete: tokens.append("-\(diff.text.utf16.count)")
            case .equal: tokens.append("=\(diff.text.utf16.count)")
            }
        }
        return tokens.joined(separator: "\t")
    }

    static func decode(_ text1: [UInt16], _ delta: String) throws(DiffMatchPatchError) -> [UnitDiff] {
        var diffs: [UnitDiff] = []
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
                diffs.append(UnitDiff(.insert, inserted))
            case "-", "=":
                guard !parameter.isEmpty, parameter.utf8.allSatisfy({ (0x30...0x39).contains($0) }),
                      let count = Int(parameter) else {
                    throw .invalidDelta("Invalid number in delta: \(token)")
                }
                let (end, overflow) = pointer.addingReportingOverflow(count)
                guard !overflow else { throw .invalidDelta("Invalid number in delta: \(token)") }
                if end > text1.count { overrun = true }
                if !overrun {
                    let text = Array(text1[pointer..<end])
                    diffs.append(UnitDiff(operation == "=" ? .equal : .delete, text))
                }
                pointer = end
            default:
                throw .invalidDelta("Invalid diff operation in delta: \(operation)")
            }
        }
        if overrun || pointer != text1.count {
            throw .deltaLengthMismatch(expected: text1.count, actual: pointer)
        }
        return diffs
    }
}
