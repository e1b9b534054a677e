/// A patch hunk over code units, the working form of `Patch`.
struct UnitPatch: Hashable, Sendable {
    var diffs: [UnitDiff] = []
    var start1 = 0
    var start2 = 0
    var length1 = 0
    var length2 = 0

    init() {}

    init(_ patch: Patch) {
        diffs = unitDiffs(patch.diffs)
        start1 = patch.start1
        start2 = patch.start2
        length1 = patch.length1
        length2 = patch.length2
    }

    var patch: Patch {
        Patch(diffs: diffs.map(\.diff), start1: start1, start2: start2, length1: length1, length2: length2)
    }
}

/// `patch_make` and `patch_addContext_`.
extension DiffMatchPatch {
    /// The diff `patch_make(text1, text2)` builds its patches from.
    func diffsForPatch(_ text1: [UInt16], _ text2: [UInt16]) -> [UnitDiff] {
        var diffs = diffMainUnits(text1, text2, checkLines: true, deadline: deadline)
        if diffs.count > 2 {
            cleanupSemantic(&diffs)
            cleanupEfficiency(&diffs)
        }
        return keepingSurrogatePairsWhole(diffs)
    }

    func makePatches(_ text1: [UInt16], _ allDiffs: [UnitDiff]) -> [UnitPatch] {
        // Empty runs carry nothing; the reference's later JavaScript drops them here too.
        let diffs = allDiffs.filter { !$0.text.isEmpty }
        if diffs.isEmpty { return [] }
        var patches: [UnitPatch] = []
        var patch = UnitPatch()
        var charCount1 = 0
        var charCount2 = 0
        // prepatch is text1 with all patches so far applied, so each hunk's context is where it
        // will apply; postpatch also has the current hunk applied.
        var prepatchText = text1
        var postpatchText = text1
        for (index, diff) in diffs.enumerated() {
            let length = diff.text.count
            if patch.diffs.isEmpty && diff.operation != .equal {
                patch.start1 = charCount1
                patch.start2 = charCount2
            }
            switch diff.operation {
            case .insert:
                patch.diffs.append(diff)
                patch.length2 += length
                let at = min(charCount2, postpatchText.count)
                postpatchText.insert(contentsOf: diff.text, at: at)
            case .delete:
                patch.length1 += length
                patch.diffs.append(diff)
                let from = min(charCount2, postpatchText.count)
                postpatchText.removeSubrange(from..<min(charCount2 + length, postpatchText.count))
            case .equal:
                if length <= 2 * patchMargin && !patch.diffs.isEmpty && index != diffs.count - 1 {
                    // Small equality inside a patch.
                    patch.diffs.append(diff)
                    patch.length1 += length
                    patch.length2 += length
                } else if length >= 2 * patchMargin && !patch.diffs.isEmpty {
                    // Time for a new patch.
                    addContext(&patch, prepatchText)
                    patches.append(patch)
                    patch = UnitPatch()
                    prepatchText = postpatchText
                    charCount1 = charCount2
                }
            }
            if diff.operation != .insert { charCount1 += length }
            if diff.operation != .delete { charCount2 += length }
        }
        if !patch.diffs.isEmpty {
            addContext(&patch, prepatchText)
            patches.append(patch)
        }
        return patches
    }

    /// Grows the hunk's context until its text is unique in `text` (within the bitap limit),
    /// then adds one more margin. Context never cuts a surrogate pair.
    func addContext(_ patch: inout UnitPatch, _ text: [UInt16]) {
        if text.isEmpty { return }
        var pattern = text.jsSubstring(patch.start2, patch.start2 + patch.length1)
        var padding = 0
        // Look for the first and last matches of pattern to see if it is unique.
        // (A margin of 0 or less could never grow the pattern: the reference would loop forever.)
        while patchMargin > 0
                && UnitSearch.indexOf(text, pattern) != UnitSearch.lastIndexOf(text, pattern, from: text.count)
                && pattern.count < effectiveMaxBits - patchMargin - patchMargin {
            padding += patchMargin
            pattern = text.jsSubstring(patch.start2 - padding, patch.start2 + patch.length1 + padding)
        }
        padding += max(patchMargin, 0)

        let prefixStart = text.pairSafeStart(patch.start2 - padding)
        let prefix = text.jsSubstring(prefixStart, patch.start2)
        if !prefix.isEmpty { patch.diffs.insert(UnitDiff(.equal, prefix), at: 0) }
        let suffixStart = patch.start2 + patch.length1
        let suffixEnd = text.pairSafeEnd(suffixStart + padding)
        let suffix = suffixStart < suffixEnd ? text.jsSubstring(suffixStart, suffixEnd) : []
        if !suffix.isEmpty { patch.diffs.append(UnitDiff(.equal, suffix)) }

        patch.start1 -= prefix.count
        patch.start2 -= prefix.count
        patch.length1 += prefix.count + suffix.count
        patch.length2 += prefix.count + suffix.count
    }
}
