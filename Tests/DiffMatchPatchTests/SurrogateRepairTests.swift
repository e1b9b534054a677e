import Testing
@testable import DiffMatchPatch

/// The reference JavaScript suite's "splitting surrogates" cases, fed as raw code-unit diffs.
@Suite struct SurrogateRepairTests {
    let dmp = DiffMatchPatch()
    static let high: UInt16 = 0xD83C
    static let lowA: UInt16 = 0xDD70  // 🅰 is D83C DD70
    static let lowB: UInt16 = 0xDD71  // 🅱 is D83C DD71

    private func repaired(_ raw: [UnitDiff]) -> [Diff] {
        diffs(keepingSurrogatePairsWhole(raw))
    }

    @Test func swappedPairBecomesWholeCharacters() {
        #expect(repaired([rawDiff(.equal, [Self.high]), rawDiff(.delete, [Self.lowA]), rawDiff(.insert, [Self.lowB])])
                == [del("🅰"), ins("🅱")])
        // An insert-first group keeps its order.
        #expect(repaired([rawDiff(.equal, [Self.high]), rawDiff(.insert, [Self.lowA]), rawDiff(.delete, [Self.lowB])])
                == [ins("🅰"), del("🅱")])
        #expect(dmp.diffToDelta(repaired([rawDiff(.equal, [Self.high]), rawDiff(.delete, [Self.lowA]), rawDiff(.insert, [Self.lowB])]))
                == dmp.diffToDelta([del("🅰"), ins("🅱")]))
    }

    @Test func straddlingInsertShiftsToWholeCharacters() {
        // [=🙋\uD83D][+\uDE4C\uD83D][=\uDE4B] is "insert 🙌 after 🙋", as the reference's later toDelta says.
        let raw = [rawDiff(.equal, units("🙋") + [0xD83D]), rawDiff(.insert, [0xDE4C, 0xD83D]), rawDiff(.equal, [0xDE4B])]
        let result = repaired(raw)
        #expect(result == [eq("🙋"), ins("🙌"), eq("🙋")])
        #expect(dmp.diffToDelta(result) == "=2\t+%F0%9F%99%8C\t=2")
    }

    @Test func wholeDiffsAreUntouched() {
        let raw = [rawDiff(.insert, units("x")), rawDiff(.delete, units("😀")), rawDiff(.equal, units("a😀"))]
        #expect(keepingSurrogatePairsWhole(raw) == raw)
    }

    @Test func adjacentEqualitiesAroundAPairMerge() {
        let raw = [rawDiff(.equal, [0x61, Self.high]), rawDiff(.equal, [Self.lowA, 0x62])]
        #expect(repaired(raw) == [eq("a🅰b")])
    }

    @Test func aDeltaLeavingHalfAPairIsRefused() {
        // The lenient reading made U+FFFD of the halves: the user's character silently lost
        // (issue 20). Simperium's iOS client expects an error for these.
        for (text, delta, offset) in [("🅰", "=1\t+x\t=1", 0), ("🖖", "=1\t-1", 0), ("☺️🖖🏿", "=3\t+(null)\t=3", 2),
                                      ("ab", "=1\t+x%uD800y\t=1", 2), ("🖖", "-1\t=1", 0)] {
            #expect(throws: DiffMatchPatchError.splitsSurrogatePair(offset: offset), "\(text) \(delta)") {
                try dmp.diffFromDelta(text, delta)
            }
            #expect(throws: DiffMatchPatchError.splitsSurrogatePair(offset: offset), "\(text) \(delta)") {
                try dmp.applyDelta(delta, to: text)
            }
        }
    }

    @Test func aDeltaCuttingPairsButLeavingWholeCharactersApplies() throws {
        #expect(try dmp.applyDelta("=1\t-2\t=1", to: "🖖🖖") == "🖖")
        #expect(dmp.diffText2(try dmp.diffFromDelta("🖖🖖", "=1\t-2\t=1")) == "🖖")
        #expect(try dmp.applyDelta("-1\t-1", to: "🖖") == "")
    }
}
