/// Rewrites diffs so that no run boundary falls between a high and a low surrogate.
///
/// The algorithms work on code units like the JavaScript reference, so a boundary may cut an
/// astral character (an emoji) in two, which no `String` can hold and `encodeURI` rejects.
/// The fix used by Simplenote's ports and the reference's later JavaScript: an equality that
/// ends with a high surrogate or starts with a low one gives that unit to the neighbouring edit
/// (both its delete and insert sides), so every delete and insert is whole characters; then
/// whole characters common to both sides of an edit go back to the equalities. Diffs with no
/// cut pair are returned unchanged, so results match the reference's exactly.
func keepingSurrogatePairsWhole(_ diffs: [UnitDiff]) -> [UnitDiff] {
    let cutsAPair = diffs.contains { diff in
        (diff.text.first?.isLowSurrogate ?? false) || (diff.text.last?.isHighSurrogate ?? false)
    }
    guard cutsAPair else { return diffs }

    var output: [UnitDiff] = []
    output.reserveCapacity(diffs.count)
    var deleted: [UInt16] = []
    var inserted: [UInt16] = []
    // Keep the reference's order of an edit group (an insert may come before a delete).
    var insertFirst = false
    var sawEdit = false

    func appendEquality<C: Collection<UInt16>>(_ text: C) {
        guard !text.isEmpty else { return }
        if let last = output.last, last.operation == .equal {
            output[output.count - 1].text += text
        } else {
            output.append(UnitDiff(.equal, Array(text)))
        }
    }

    func flushEdits() {
        var prefix = UnitSearch.commonPrefix(deleted, inserted)
        if prefix > 0 && deleted[prefix - 1].isHighSurrogate { prefix -= 1 }
        appendEquality(deleted[..<prefix])
        var delete = deleted[prefix...]
        var insert = inserted[prefix...]
        var suffix = UnitSearch.commonSuffix(delete, insert)
        if suffix > 0 && delete[delete.endIndex - suffix].isLowSurrogate { suffix -= 1 }
        let common = delete.suffix(suffix)
        delete = delete.dropLast(suffix)
        insert = insert.dropLast(suffix)
        let edits = [UnitDiff(.delete, Array(delete)), UnitDiff(.insert, Array(insert))]
        for edit in insertFirst ? edits.reversed() : edits where !edit.text.isEmpty {
            output.append(edit)
        }
        appendEquality(common)
        deleted = []
        inserted = []
        insertFirst = false
        sawEdit = false
    }

    for diff in diffs {
        switch diff.operation {
        case .delete:
            sawEdit = true
            deleted += diff.text
        case .insert:
            if !sawEdit { insertFirst = true }
            sawEdit = true
            inserted += diff.text
        case .equal:
            var equal = diff.text[...]
            let hasPendingEdit = !deleted.isEmpty || !inserted.isEmpty
            if hasPendingEdit, let first = equal.first, first.isLowSurrogate {
                deleted.append(first)
                inserted.append(first)
                equal = equal.dropFirst()
            }
            var carried: UInt16?
            if let last = equal.last, last.isHighSurrogate {
                carried = last
                equal = equal.dropLast()
            }
            if !equal.isEmpty {
                flushEdits()
                appendEquality(equal)
            }
            if let carried {
                deleted.append(carried)
                inserted.append(carried)
            }
        }
    }
    flushEdits()
    return output
}
