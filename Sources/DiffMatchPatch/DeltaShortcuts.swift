/// Delta round trips for jsondiff's `d` operation that stay on code units from text to delta and
/// back, instead of materializing a `String` per diff run between the public steps. Results are
/// exactly those of the public calls they stand for.
extension DiffMatchPatch {
    /// `diffToDelta` of `diffMain(text1, text2)` after `diffCleanupSemantic`.
    package func semanticDelta(from text1: String, to text2: String) -> String {
        // The public steps each pass through `keepingSurrogatePairsWhole` and Strings; the
        // repaired runs never split a pair, so the Strings round trip changes nothing.
        var diffs = keepingSurrogatePairsWhole(
            diffMainUnits(utf16Units(text1), utf16Units(text2), checkLines: true, deadline: deadline))
        cleanupSemantic(&diffs)
        return Delta.encode(keepingSurrogatePairsWhole(diffs))
    }

    /// `diffText2(diffFromDelta(text1, delta))`: the text a delta makes of `text1`.
    package func applyDelta(_ delta: String, to text1: String) throws(DiffMatchPatchError) -> String {
        var source = text1
        let result = source.withUTF8 { bytes in
            Result { () throws(DiffMatchPatchError) in try applyDelta(delta, toUTF8: bytes) }
        }
        // A run boundary between the halves of a surrogate pair: the public path repairs those
        // (rarely needed) before building Strings, or refuses them when the result would hold
        // half a pair, so such deltas take it.
        guard let text = try result.get() else { return diffText2(try diffFromDelta(text1, delta)) }
        return text
    }

    /// The delta applied to UTF-8 text, counting UTF-16 units as it goes; nil when a run boundary
    /// falls inside a surrogate pair. Without such a boundary, converting the runs one by one (as
    /// the public path does) and converting their concatenation give the same text.
    private func applyDelta(_ delta: String, toUTF8 source: UnsafeBufferPointer<UInt8>) throws(DiffMatchPatchError) -> String? {
        var output: [UInt8] = []
        output.reserveCapacity(source.count + delta.utf8.count)
        var byteOffset = 0
        var cutsAPair = false
        func advance(by units: Int, copying: Bool) {
            guard !cutsAPair else { return }
            guard let end = utf8Offset(advancing: units, from: byteOffset, in: source) else {
                cutsAPair = true
                return
            }
            if copying { output.append(contentsOf: UnsafeBufferPointer(rebasing: source[byteOffset..<end])) }
            byteOffset = end
        }
        try Delta.scan(sourceCount: utf16Count(source), delta) { token in
            switch token {
            case .keep(let range):
                advance(by: range.count, copying: true)
            case .delete(let range):
                advance(by: range.count, copying: false)
            case .insert(let units):
                guard !cutsAPair else { return }
                // Half a pair at either end (or, from a `%u` escape, inside): the checked path
                // decides whether the result still holds whole characters.
                if firstUnpairedSurrogate(units) != nil { cutsAPair = true }
                output.append(contentsOf: utf8Bytes(units))
            }
        }
        if cutsAPair { return nil }
        return String(decoding: output, as: UTF8.self)
    }

    /// The UTF-16 length of the text `delta` applies to (the total of its `=`/`-` counts), so a
    /// caller that knows more than one form of its source text can tell which one it was made from.
    package func deltaSourceLength(_ delta: String) throws(DiffMatchPatchError) -> Int {
        // A source length no delta can total: the scan visits nothing and reports the total.
        do {
            try Delta.scan(sourceCount: -1, delta) { _ in }
        } catch {
            guard case .deltaLengthMismatch(_, let actual) = error else { throw error }
            return actual
        }
        return -1
    }
}
