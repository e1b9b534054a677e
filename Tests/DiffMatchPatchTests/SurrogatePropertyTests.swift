import PropertyBased
import Testing
@testable import DiffMatchPatch

/// Astral characters (emoji) must never be cut: every diff text is a whole String, the texts
/// rebuild exactly, and deltas and patches round-trip.
@Suite struct SurrogatePropertyTests {
    /// A small alphabet so random texts share a lot, with emoji that share high surrogates
    /// (U+1F600...U+1F64C all start with D83D) to provoke boundaries inside pairs.
    static let alphabet: [Character] = ["a", "b", " ", "\n", "é", "€", "😀", "😁", "😂", "🙋", "🙌", "🅰", "🅱", "𝄞", "👍🏽"]
    static let text = Gen<Character?>.element(of: alphabet).map { $0 ?? "a" }.string(of: 0...24)

    static func isWhole(_ diffs: [Diff]) -> Bool {
        diffs.allSatisfy { diff in
            guard let first = diff.text.utf16.first, let last = diff.text.utf16.last else { return false }
            return !first.isLowSurrogate && !last.isHighSurrogate && !diff.text.contains("\u{FFFD}")
        }
    }

    @Test func diffsNeverSplitPairs() async {
        await propertyCheck(count: 300, input: Self.text, Self.text, Self.text, Self.text) { prefix, middle1, middle2, suffix in
            let text1 = prefix + middle1 + suffix
            let text2 = prefix + middle2 + suffix
            for checkLines in [false, true] {
                let dmp = DiffMatchPatch()
                var diffs = dmp.diffMain(text1, text2, checkLines: checkLines)
                #expect(Self.isWhole(diffs))
                #expect(dmp.diffText1(diffs) == text1)
                #expect(dmp.diffText2(diffs) == text2)
                let delta = dmp.diffToDelta(diffs)
                #expect((try? dmp.diffFromDelta(text1, delta)) == diffs)

                dmp.diffCleanupSemantic(&diffs)
                #expect(Self.isWhole(diffs))
                #expect(dmp.diffText1(diffs) == text1 && dmp.diffText2(diffs) == text2)
                dmp.diffCleanupEfficiency(&diffs)
                #expect(Self.isWhole(diffs))
                #expect(dmp.diffText1(diffs) == text1 && dmp.diffText2(diffs) == text2)
            }
        }
    }

    @Test func unitLevelDiffsAreRepaired() async {
        // The raw code-unit diff (what the JavaScript reference returns) may cut pairs; the repair
        // must keep both texts while making every run whole.
        await propertyCheck(count: 300, input: Self.text, Self.text) { text1, text2 in
            let dmp = DiffMatchPatch()
            let raw = dmp.diffMainUnits(units(text1), units(text2), checkLines: false, deadline: nil)
            let repaired = keepingSurrogatePairsWhole(raw)
            #expect(Self.isWhole(diffs(repaired)))
            #expect(sourceUnits(of: repaired) == units(text1))
            #expect(destinationUnits(of: repaired) == units(text2))
        }
    }

    @Test func patchesRoundTripAndApply() async {
        await propertyCheck(count: 150, input: Self.text, Self.text, Self.text) { prefix, middle, suffix in
            let dmp = DiffMatchPatch()
            let text1 = prefix + suffix + middle
            let text2 = prefix + middle + suffix
            let patches = dmp.patchMake(text1, text2)
            #expect(patches.allSatisfy { Self.isWhole($0.diffs) })
            #expect((try? dmp.patchFromText(dmp.patchToText(patches))) == patches)
            let applied = dmp.patchApply(patches, to: text1)
            #expect(applied.text == text2)
            #expect(applied.applied.allSatisfy { $0 })
        }
    }
}
