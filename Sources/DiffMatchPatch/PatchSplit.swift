/// `patch_splitMax`.
extension DiffMatchPatch {
    /// Breaks hunks longer than the bitap limit into smaller ones with fresh context.
    func splitMax(_ patches: inout [UnitPatch]) {
        let patchSize = effectiveMaxBits
        let margin = max(patchMargin, 0)
        var result: [UnitPatch] = []
        result.reserveCapacity(patches.count)
        for bigPatch in patches {
            if bigPatch.length1 <= patchSize {
                result.append(bigPatch)
                continue
            }
            var remaining = bigPatch.diffs[...]
            var start1 = bigPatch.start1
            var start2 = bigPatch.start2
            var precontext: [UInt16] = []
            while !remaining.isEmpty {
                let remainingBefore = (remaining.count, remaining.first?.text.count)
                var patch = UnitPatch()
                var empty = true
                patch.start1 = start1 - precontext.count
                patch.start2 = start2 - precontext.count
                if !precontext.isEmpty {
                    patch.length1 = precontext.count
                    patch.length2 = precontext.count
                    patch.diffs.append(UnitDiff(.equal, precontext))
                }
                while let next = remaining.first, patch.length1 < patchSize - margin {
                    let diffText = next.text
                    if next.operation == .insert {
                        // Insertions are harmless.
                        patch.length2 += diffText.count
                        start2 += diffText.count
                        patch.diffs.append(next)
                        remaining.removeFirst()
                        empty = false
                    } else if next.operation == .delete && patch.diffs.count == 1
                                && patch.diffs[0].operation == .equal && diffText.count > 2 * patchSize {
                        // This is a large deletion. Let it pass in one chunk.
                        patch.length1 += diffText.count
                        start1 += diffText.count
                        empty = false
                        patch.diffs.append(next)
                        remaining.removeFirst()
                    } else {
                        // Deletion or equality. Only take as much as we can stomach.
                        var cut = min(diffText.count, patchSize - patch.length1 - margin)
                        if cut < diffText.count && cut > 0 && diffText[cut - 1].isHighSurrogate {
                            // Never cut a surrogate pair: give back its high half, or take the pair.
                            cut = cut > 1 ? cut - 1 : min(2, diffText.count)
                        }
                        let piece = Array(diffText[..<cut])
                        patch.length1 += piece.count
                        start1 += piece.count
                        if next.operation == .equal {
                            patch.length2 += piece.count
                            start2 += piece.count
                        } else {
                            empty = false
                        }
                        patch.diffs.append(UnitDiff(next.operation, piece))
                        if piece.count == diffText.count {
                            remaining.removeFirst()
                        } else {
                            remaining[remaining.startIndex].text = Array(diffText[cut...])
                        }
                    }
                }
                if remainingBefore == (remaining.count, remaining.first?.text.count), let next = remaining.first {
                    // A margin as large as the bitap limit leaves no room: take the diff whole
                    // rather than loop forever (the reference would hang here).
                    patch.diffs.append(next)
                    remaining.removeFirst()
                    if next.operation != .insert { patch.length1 += next.text.count; start1 += next.text.count }
                    if next.operation != .delete { patch.length2 += next.text.count; start2 += next.text.count }
                    if next.operation != .equal { empty = false }
                }
                // Compute the head context for the next patch.
                let patchText2 = destinationUnits(of: patch.diffs)
                precontext = patchText2.jsSubstring(patchText2.pairSafeStart(patchText2.count - margin))
                // Append the end context for this patch.
                let remainingText1 = sourceUnits(of: Array(remaining))
                let postcontext = remainingText1.jsSubstring(0, remainingText1.pairSafeEnd(margin))
                if !postcontext.isEmpty {
                    patch.length1 += postcontext.count
                    patch.length2 += postcontext.count
                    if let lastIndex = patch.diffs.indices.last, patch.diffs[lastIndex].operation == .equal {
                        patch.diffs[lastIndex].text += postcontext
                    } else {
                        patch.diffs.append(UnitDiff(.equal, postcontext))
                    }
                }
                if !empty { result.append(patch) }
            }
        }
        patches = result
    }
}
