/// `patch_apply` and `patch_addPadding`.
extension DiffMatchPatch {
    func applyPatches(_ input: [UnitPatch], to source: [UInt16]) -> ([UInt16], [Bool]) {
        if input.isEmpty { return (source, []) }
        var patches = input
        let nullPadding = addPadding(&patches)
        var text = nullPadding + source + nullPadding
        splitMax(&patches)

        let maxBits = effectiveMaxBits
        // delta is the offset between where a patch was expected and where it was found,
        // carried to the next patch.
        var delta = 0
        var results: [Bool] = []
        results.reserveCapacity(patches.count)
        for patch in patches {
            let expectedLoc = patch.start2 + delta
            let text1 = sourceUnits(of: patch.diffs)
            var startLoc: Int?
            var endLoc: Int?
            if text1.count > maxBits {
                // splitMax only leaves patches this long for a monster delete: match both ends.
                startLoc = matchMainUnits(text, Array(text1[..<maxBits]), expectedLoc)
                if let start = startLoc {
                    endLoc = matchMainUnits(text, Array(text1[(text1.count - maxBits)...]),
                                            expectedLoc + text1.count - maxBits)
                    if endLoc == nil || start >= (endLoc ?? 0) { startLoc = nil }
                }
            } else {
                startLoc = matchMainUnits(text, text1, expectedLoc)
            }
            guard var start = startLoc else {
                results.append(false)
                // Subtract the delta for this failed patch from subsequent patches.
                delta -= patch.length2 - patch.length1
                continue
            }
            // A fuzzy match may land inside a surrogate pair; start at the pair instead.
            start = text.pairSafeStart(start)
            delta = start - expectedLoc
            let end = endLoc.map { text.pairSafeEnd($0 + maxBits) } ?? text.pairSafeEnd(start + text1.count)
            let text2 = text.jsSubstring(start, end)
            if text1 == text2 {
                // Perfect match, just shove the replacement text in.
                text.replaceSubrange(start..<min(start + text1.count, text.count), with: destinationUnits(of: patch.diffs))
                results.append(true)
                continue
            }
            // Imperfect match: diff the expected text against what is there, map each edit over.
            var diffs = diffMainUnits(text1, text2, checkLines: false, deadline: deadline)
            if text1.count > maxBits && Double(levenshtein(diffs)) / Double(text1.count) > patchDeleteThreshold {
                // The end points match, but the content is unacceptably bad.
                results.append(false)
                continue
            }
            cleanupSemanticLossless(&diffs)
            diffs = keepingSurrogatePairsWhole(diffs)
            var index1 = 0
            for mod in patch.diffs {
                if mod.operation != .equal {
                    let index2 = xIndex(diffs, index1)
                    let at = min(max(start + index2, 0), text.count)
                    if mod.operation == .insert {
                        text.insert(contentsOf: mod.text, at: at)
                    } else {
                        let deleteEnd = min(max(start + xIndex(diffs, index1 + mod.text.count), at), text.count)
                        text.removeSubrange(at..<deleteEnd)
                    }
                }
                if mod.operation != .delete { index1 += mod.text.count }
            }
            results.append(true)
        }
        // Strip the padding off.
        let trimmed = text.jsSubstring(nullPadding.count, text.count - nullPadding.count)
        return (trimmed, results)
    }

    /// Adds `patchMargin` units of padding (codes 1...margin) at both ends so that edits at the
    /// edges of the text can still be matched; returns the padding.
    func addPadding(_ patches: inout [UnitPatch]) -> [UInt16] {
        let paddingLength = max(patchMargin, 0)
        let nullPadding = (0..<paddingLength).map { UInt16(truncatingIfNeeded: $0 + 1) }
        for index in patches.indices {
            patches[index].start1 += paddingLength
            patches[index].start2 += paddingLength
        }
        guard !patches.isEmpty else { return nullPadding }

        // Add some padding on start of first diff.
        var first = patches[0]
        if first.diffs.first?.operation != .equal {
            first.diffs.insert(UnitDiff(.equal, nullPadding), at: 0)
            first.start1 -= paddingLength
            first.start2 -= paddingLength
            first.length1 += paddingLength
            first.length2 += paddingLength
        } else if paddingLength > first.diffs[0].text.count {
            let extraLength = paddingLength - first.diffs[0].text.count
            first.diffs[0].text = Array(nullPadding[first.diffs[0].text.count...]) + first.diffs[0].text
            first.start1 -= extraLength
            first.start2 -= extraLength
            first.length1 += extraLength
            first.length2 += extraLength
        }
        patches[0] = first

        // Add some padding on end of last diff.
        var last = patches[patches.count - 1]
        if last.diffs.last?.operation != .equal {
            last.diffs.append(UnitDiff(.equal, nullPadding))
            last.length1 += paddingLength
            last.length2 += paddingLength
        } else if paddingLength > last.diffs[last.diffs.count - 1].text.count {
            let lastIndex = last.diffs.count - 1
            let extraLength = paddingLength - last.diffs[lastIndex].text.count
            last.diffs[lastIndex].text += nullPadding[..<extraLength]
            last.length1 += extraLength
            last.length2 += extraLength
        }
        patches[patches.count - 1] = last
        return nullPadding
    }
}
