/// The reference's diff cleanups (`diff_cleanupSemantic`, `diff_cleanupSemanticLossless`,
/// `diff_cleanupEfficiency`, `diff_cleanupMerge`) on code units, step for step.
extension DiffMatchPatch {
    /// Eliminates equalities no longer than the edits on both sides, then overlaps.
    func cleanupSemantic(_ diffs: inout [UnitDiff]) {
        var changes = false
        var equalities: [Int] = []
        var lastEquality: [UInt16]?
        var pointer = 0
        var insertions1 = 0, deletions1 = 0, insertions2 = 0, deletions2 = 0
        while pointer < diffs.count {
            if diffs[pointer].operation == .equal {
                equalities.append(pointer)
                insertions1 = insertions2
                deletions1 = deletions2
                insertions2 = 0
                deletions2 = 0
                lastEquality = diffs[pointer].text
            } else {
                if diffs[pointer].operation == .insert {
                    insertions2 += diffs[pointer].text.count
                } else {
                    deletions2 += diffs[pointer].text.count
                }
                // An empty string is falsy in the reference, hence the isEmpty test.
                if let equality = lastEquality, !equality.isEmpty,
                   equality.count <= max(insertions1, deletions1),
                   equality.count <= max(insertions2, deletions2),
                   let equalityIndex = equalities.last {
                    diffs.insert(UnitDiff(.delete, equality), at: equalityIndex)
                    diffs[equalityIndex + 1].operation = .insert
                    equalities.removeLast()
                    if !equalities.isEmpty { equalities.removeLast() }
                    pointer = equalities.last ?? -1
                    insertions1 = 0
                    deletions1 = 0
                    insertions2 = 0
                    deletions2 = 0
                    lastEquality = nil
                    changes = true
                }
            }
            pointer += 1
        }
        if changes { cleanupMerge(&diffs) }
        cleanupSemanticLossless(&diffs)

        // Extract overlaps between a deletion and the following insertion:
        // <del>abcxxx</del><ins>xxxdef</ins> -> <del>abc</del>xxx<ins>def</ins>.
        pointer = 1
        while pointer < diffs.count {
            if diffs[pointer - 1].operation == .delete && diffs[pointer].operation == .insert {
                let deletion = diffs[pointer - 1].text
                let insertion = diffs[pointer].text
                let overlap1 = UnitSearch.commonOverlap(deletion, insertion)
                let overlap2 = UnitSearch.commonOverlap(insertion, deletion)
                if overlap1 >= overlap2 {
                    if overlap1 * 2 >= deletion.count || overlap1 * 2 >= insertion.count {
                        diffs.insert(UnitDiff(.equal, Array(insertion[..<overlap1])), at: pointer)
                        diffs[pointer - 1].text = Array(deletion[..<(deletion.count - overlap1)])
                        diffs[pointer + 1].text = Array(insertion[overlap1...])
                        pointer += 1
                    }
                } else if overlap2 * 2 >= deletion.count || overlap2 * 2 >= insertion.count {
                    diffs.insert(UnitDiff(.equal, Array(deletion[..<overlap2])), at: pointer)
                    diffs[pointer - 1] = UnitDiff(.insert, Array(insertion[..<(insertion.count - overlap2)]))
                    diffs[pointer + 1] = UnitDiff(.delete, Array(deletion[overlap2...]))
                    pointer += 1
                }
                pointer += 1
            }
            pointer += 1
        }
    }

    /// Slides single edits surrounded by equalities to the best-scoring word/line boundary.
    func cleanupSemanticLossless(_ diffs: inout [UnitDiff]) {
        var pointer = 1
        while pointer < diffs.count - 1 {
            if diffs[pointer - 1].operation == .equal && diffs[pointer + 1].operation == .equal {
                var equality1 = diffs[pointer - 1].text
                var edit = diffs[pointer].text
                var equality2 = diffs[pointer + 1].text

                // Shift the edit as far left as possible.
                let commonOffset = UnitSearch.commonSuffix(equality1, edit)
                if commonOffset > 0 {
                    let common = edit[(edit.count - commonOffset)...]
                    equality1.removeLast(commonOffset)
                    edit = Array(common) + edit[..<(edit.count - commonOffset)]
                    equality2 = Array(common) + equality2
                }

                // Then step right one unit at a time, keeping the best score.
                var bestEquality1 = equality1
                var bestEdit = edit
                var bestEquality2 = equality2
                var bestScore = SemanticScore.score(equality1, edit) + SemanticScore.score(edit, equality2)
                var offset = 0
                while offset < equality2.count, !edit.isEmpty, edit[0] == equality2[offset] {
                    equality1.append(edit[0])
                    edit.removeFirst()
                    edit.append(equality2[offset])
                    offset += 1
                    let rest = equality2[offset...]
                    let score = SemanticScore.score(equality1, edit) + SemanticScore.score(edit, rest)
                    // The >= favours the rightmost position among equal scores, as the reference does.
                    if score >= bestScore {
                        bestScore = score
                        bestEquality1 = equality1
                        bestEdit = edit
                        bestEquality2 = Array(rest)
                    }
                }

                if diffs[pointer - 1].text != bestEquality1 {
                    if !bestEquality1.isEmpty {
                        diffs[pointer - 1].text = bestEquality1
                    } else {
                        diffs.remove(at: pointer - 1)
                        pointer -= 1
                    }
                    diffs[pointer].text = bestEdit
                    if !bestEquality2.isEmpty {
                        diffs[pointer + 1].text = bestEquality2
                    } else {
                        diffs.remove(at: pointer + 1)
                        pointer -= 1
                    }
                }
            }
            pointer += 1
        }
    }

    /// Eliminates short equalities between edits when the edit cost says it is cheaper.
    func cleanupEfficiency(_ diffs: inout [UnitDiff]) {
        var changes = false
        var equalities: [Int] = []
        var lastEquality: [UInt16]?
        var pointer = 0
        var preInsert = false, preDelete = false, postInsert = false, postDelete = false
        while pointer < diffs.count {
            if diffs[pointer].operation == .equal {
                if diffs[pointer].text.count < diffEditCost && (postInsert || postDelete) {
                    equalities.append(pointer)
                    preInsert = postInsert
                    preDelete = postDelete
                    lastEquality = diffs[pointer].text
                } else {
                    equalities.removeAll()
                    lastEquality = nil
                }
                postInsert = false
                postDelete = false
            } else {
                if diffs[pointer].operation == .delete {
                    postDelete = true
                } else {
                    postInsert = true
                }
                // <ins>A</ins><del>B</del>X<ins>C</ins><del>D</del> (all four) or
                // <ins>A</ins>X<ins>C</ins><del>D</del> (three, with X shorter than half the cost).
                let sides = [preInsert, preDelete, postInsert, postDelete].filter { $0 }.count
                if let equality = lastEquality, !equality.isEmpty, let equalityIndex = equalities.last,
                   sides == 4 || (equality.count * 2 < diffEditCost && sides == 3) {
                    diffs.insert(UnitDiff(.delete, equality), at: equalityIndex)
                    diffs[equalityIndex + 1].operation = .insert
                    equalities.removeLast()
                    lastEquality = nil
                    if preInsert && preDelete {
                        // No changes made which could affect previous entry, keep going.
                        postInsert = true
                        postDelete = true
                        equalities.removeAll()
                    } else {
                        if !equalities.isEmpty { equalities.removeLast() }
                        pointer = equalities.last ?? -1
                        postInsert = false
                        postDelete = false
                    }
                    changes = true
                }
            }
            pointer += 1
        }
        if changes { cleanupMerge(&diffs) }
    }

    /// Merges like runs, factors common affixes out of delete/insert pairs and slides single
    /// edits over neighbouring equalities to merge them away.
    func cleanupMerge(_ diffs: inout [UnitDiff]) {
        // The reference edits the array in place (splicing in front of a pointer); this builds the
        // same result in a new array: `merged` always equals the reference's array up to its pointer.
        var merged: [UnitDiff] = []
        merged.reserveCapacity(diffs.count + 1)
        var groupStart = 0
        var countDelete = 0
        var countInsert = 0
        let count = diffs.count
        // One pass over the diffs plus an empty equality at the end, as the reference appends.
        for index in 0...count {
            var equality = index < count ? diffs[index] : UnitDiff(.equal, [])
            switch equality.operation {
            case .insert:
                countInsert += 1
                continue
            case .delete:
                countDelete += 1
                continue
            case .equal:
                break
            }
            if countDelete + countInsert > 1 {
                var textDelete: [UInt16] = []
                var textInsert: [UInt16] = []
                for edit in diffs[groupStart..<index] {
                    if edit.operation == .insert { textInsert += edit.text } else { textDelete += edit.text }
                }
                if countDelete != 0 && countInsert != 0 {
                    var common = UnitSearch.commonPrefix(textInsert, textDelete)
                    if common != 0 {
                        if let last = merged.last, last.operation == .equal {
                            merged[merged.count - 1].text += textInsert[..<common]
                        } else {
                            // The reference splices at 0 here, not before the edits.
                            merged.insert(UnitDiff(.equal, Array(textInsert[..<common])), at: 0)
                        }
                        textInsert.removeFirst(common)
                        textDelete.removeFirst(common)
                    }
                    common = UnitSearch.commonSuffix(textInsert, textDelete)
                    if common != 0 {
                        equality.text = Array(textInsert[(textInsert.count - common)...]) + equality.text
                        textInsert.removeLast(common)
                        textDelete.removeLast(common)
                    }
                }
                if !textDelete.isEmpty { merged.append(UnitDiff(.delete, textDelete)) }
                if !textInsert.isEmpty { merged.append(UnitDiff(.insert, textInsert)) }
                merged.append(equality)
            } else if countDelete + countInsert == 0, let last = merged.last, last.operation == .equal {
                merged[merged.count - 1].text += equality.text
            } else {
                merged.append(contentsOf: diffs[groupStart..<index])
                merged.append(equality)
            }
            groupStart = index + 1
            countDelete = 0
            countInsert = 0
        }
        if let last = merged.last, last.text.isEmpty { merged.removeLast() }
        diffs = merged

        // Second pass: A<ins>BA</ins>C -> <ins>AB</ins>AC, and AB<ins>CB</ins> ... sideways shifts.
        var changes = false
        var pointer = 1
        while pointer < diffs.count - 1 {
            if diffs[pointer - 1].operation == .equal && diffs[pointer + 1].operation == .equal {
                let previous = diffs[pointer - 1].text
                let edit = diffs[pointer].text
                let next = diffs[pointer + 1].text
                if previous.count <= edit.count && edit[(edit.count - previous.count)...].elementsEqual(previous) {
                    // Shift the edit over the previous equality.
                    diffs[pointer].text = previous + edit[..<(edit.count - previous.count)]
                    diffs[pointer + 1].text = previous + next
                    diffs.remove(at: pointer - 1)
                    changes = true
                } else if next.count <= edit.count && edit[..<next.count].elementsEqual(next) {
                    // Shift the edit over the next equality.
                    diffs[pointer - 1].text += next
                    diffs[pointer].text = Array(edit[next.count...]) + next
                    diffs.remove(at: pointer + 1)
                    changes = true
                }
            }
            pointer += 1
        }
        if changes { cleanupMerge(&diffs) }
    }

    /// Levenshtein distance: the larger of inserted and deleted units between equalities.
    func levenshtein(_ diffs: [UnitDiff]) -> Int {
        var distance = 0
        var insertions = 0
        var deletions = 0
        for diff in diffs {
            switch diff.operation {
            case .insert: insertions += diff.text.count
            case .delete: deletions += diff.text.count
            case .equal:
                distance += max(insertions, deletions)
                insertions = 0
                deletions = 0
            }
        }
        return distance + max(insertions, deletions)
    }

    /// The text2 offset equivalent to `location` in text1 (start of a deletion maps to its start).
    func xIndex(_ diffs: [UnitDiff], _ location: Int) -> Int {
        var chars1 = 0, chars2 = 0, lastChars1 = 0, lastChars2 = 0
        var overshot: UnitDiff?
        for diff in diffs {
            if diff.operation != .insert { chars1 += diff.text.count }
            if diff.operation != .delete { chars2 += diff.text.count }
            if chars1 > location {
                overshot = diff
                break
            }
            lastChars1 = chars1
            lastChars2 = chars2
        }
        if let overshot, overshot.operation == .delete { return lastChars2 }
        return lastChars2 + (location - lastChars1)
    }
}
