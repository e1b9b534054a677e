import DiffMatchPatch

/// The diff-match-patch side of jsondiff: `d` string deltas and `dL` list-as-text deltas.
enum TextDelta {
    static let dmp = DiffMatchPatch()

    /// The `d` delta turning `source` into `target` (diffMain + semantic cleanup, as the brief of
    /// the wire format asks; counts are UTF-16 code units).
    static func stringDelta(from source: String, to target: String) -> String {
        dmp.semanticDelta(from: source, to: target)
    }

    /// Applies a delta strictly: it must account for exactly the whole source text.
    static func apply(_ delta: String, to source: String) throws(JSONDiffError) -> String {
        do {
            return try dmp.applyDelta(delta, to: source)
        } catch {
            switch error {
            case .deltaLengthMismatch(let expected, let actual):
                throw .deltaDoesNotFit(path: [], reason: "delta covers \(actual) UTF-16 units, text has \(expected)")
            case .invalidDelta(let reason), .invalidPatchText(let reason):
                throw .deltaDoesNotFit(path: [], reason: reason)
            case .splitsSurrogatePair(let offset):
                throw .deltaDoesNotFit(
                    path: [], reason: "delta splits a character (surrogate pair) at UTF-16 offset \(offset) of its result")
            }
        }
    }

    /// The diff runs a delta makes of `source` (no run splits a surrogate pair); a delta that
    /// does not fit is the same typed error as for `apply`.
    static func diffs(_ delta: String, of source: String) throws(JSONDiffError) -> [Diff] {
        do {
            return try dmp.diffFromDelta(source, delta)
        } catch {
            _ = try apply(delta, to: source)  // rethrows the typed "does not fit" error
            throw .deltaDoesNotFit(path: [], reason: "\(error)")
        }
    }

    // MARK: - Lists as text (dL)

    /// The reference's list text: each item as compact JSON followed by a newline.
    static func listText(_ items: [JSONValue]) -> String {
        var text = ""
        for item in items {
            text += item.compactRendered()
            text += "\n"
        }
        return text
    }

    /// Applies a `dL` delta to a list. Simperium's iOS client writes the list text with items
    /// joined by newlines and no newline after the last (issue 20); the reference ends every item
    /// with one. The two texts of a non-empty list differ by that last unit, so the delta's own
    /// length tells which one it was made from.
    static func applyListDelta(_ delta: String, to list: [JSONValue]) throws(JSONDiffError) -> [JSONValue] {
        var source = listText(list)
        if isIOSForm(delta, referenceText: source) { source.removeLast() }
        return try items(fromListText: apply(delta, to: source))
    }

    /// The delta in the reference's form: an iOS-form delta is restated as the line delta from
    /// the list's reference text to its result's (so that the text after it is the reference
    /// text of the list it makes, which rebasing needs); any other delta is returned as it is.
    static func referenceListDelta(_ delta: String, list: [JSONValue]) throws(JSONDiffError) -> String {
        let source = listText(list)
        guard isIOSForm(delta, referenceText: source) else { return delta }
        return lineDelta(from: source, to: listText(try applyListDelta(delta, to: list)))
    }

    private static func isIOSForm(_ delta: String, referenceText: String) -> Bool {
        guard !referenceText.isEmpty, let length = try? dmp.deltaSourceLength(delta) else { return false }
        return length == referenceText.utf16.count - 1
    }

    /// Parses list text back into items; empty lines are skipped as in the reference.
    static func items(fromListText text: String) throws(JSONDiffError) -> [JSONValue] {
        var items: [JSONValue] = []
        for line in text.utf8.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: true) {
            do {
                items.append(try JSONValue(parsing: line))
            } catch {
                throw .deltaDoesNotFit(path: [], reason: "list line \(items.count + 1) is not JSON (\(error))")
            }
        }
        return items
    }

    /// A delta between two texts computed line by line (each distinct line becomes one symbol),
    /// so list items are added and removed whole.
    static func lineDelta(from source: String, to target: String) -> String {
        let sourceLines = lines(source)
        let targetLines = lines(target)
        var alphabet = SymbolAlphabet<Substring>()
        guard let sourceSymbols = alphabet.encode(sourceLines),
              let targetSymbols = alphabet.encode(targetLines) else {
            var diffs = dmp.diffMain(source, target)  // too many distinct lines for the alphabet
            dmp.diffCleanupSemantic(&diffs)
            return dmp.diffToDelta(diffs)
        }
        let symbolDiffs = dmp.diffMain(sourceSymbols, targetSymbols, checkLines: false)
        var diffs: [Diff] = []
        var sourceIndex = 0
        var targetIndex = 0
        for diff in symbolDiffs {
            let count = diff.text.unicodeScalars.count
            let text: String
            switch diff.operation {
            case .equal, .delete:
                text = sourceLines[sourceIndex..<sourceIndex + count].joined()
                sourceIndex += count
                if diff.operation == .equal { targetIndex += count }
            case .insert:
                text = targetLines[targetIndex..<targetIndex + count].joined()
                targetIndex += count
            }
            diffs.append(Diff(diff.operation, text))
        }
        return dmp.diffToDelta(diffs)
    }

    /// Lines including their terminating newline (the last may have none). Split on the byte,
    /// not on Characters, where "\r\n" would be one grapheme.
    private static func lines(_ text: String) -> [Substring] {
        var result: [Substring] = []
        let utf8 = text.utf8
        var start = utf8.startIndex
        var index = utf8.startIndex
        while index < utf8.endIndex {
            let next = utf8.index(after: index)
            if utf8[index] == UInt8(ascii: "\n") {
                result.append(text[start..<next])
                start = next
            }
            index = next
        }
        if start < utf8.endIndex { result.append(text[start...]) }
        return result
    }
}

/// Maps distinct values to distinct BMP scalars, so that diff-match-patch (which diffs UTF-16 text)
/// can diff sequences of lines or list items as one symbol each.
struct SymbolAlphabet<Element: Hashable> {
    private var codes: [Element: Unicode.Scalar] = [:]
    private var next: UInt32 = 0x100

    /// The sequence as a string of symbols; nil when the alphabet (about 63,000 symbols) runs out.
    mutating func encode(_ elements: some Sequence<Element>) -> String? {
        var scalars = String.UnicodeScalarView()
        for element in elements {
            if let code = codes[element] {
                scalars.append(code)
                continue
            }
            if next == 0xD800 { next = 0xE000 }  // skip the surrogate range
            guard next <= 0xFFFD, let code = Unicode.Scalar(next) else { return nil }
            next += 1
            codes[element] = code
            scalars.append(code)
        }
        return String(scalars)
    }
}
