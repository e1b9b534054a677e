import PropertyBased
import Testing
import DiffMatchPatch

/// Hostile inputs (patch texts from elsewhere, odd settings) give errors or odd results, never a crash or hang.
@Suite struct RobustnessTests {
    static let piece = Gen<Character?>.element(of: ["a", "b", "😀", " ", "%"] as [Character]).map { $0 ?? "a" }.string(of: 0...6)
    static let line = Gen<Int>.int(in: 0...4).map { ["-", "+", " ", "@", "x"][$0] }
    static let number = Gen<Int>.int(in: 0...300)

    @Test func arbitraryPatchTextsApplyWithoutCrashing() async {
        await propertyCheck(count: 300, input: Self.number, Self.number, Self.line, Self.piece, Self.piece) { start, length, sign, body, text in
            let dmp = DiffMatchPatch()
            let patchText = "@@ -\(start),\(length) +\(length),\(start) @@\n\(sign)\(body)\n \(text)\n"
            guard let patches = try? dmp.patchFromText(patchText) else { return }
            let target = String(repeating: text + body, count: 1 + start % 7)
            let result = dmp.patchApply(patches, to: target)
            // A hunk that failed (or held no edit, and was dropped when split) leaves the text alone.
            if !result.applied.contains(true) { #expect(result.text == target) }
            #expect(!result.text.unicodeScalars.contains("\u{FFFD}"))
        }
    }

    @Test func oddSettingsTerminate() {
        var dmp = DiffMatchPatch()
        let text1 = String(repeating: "abcabc😀 ", count: 30)
        let text2 = String(repeating: "abXabc😁 ", count: 30)
        for (margin, maxBits) in [(0, 32), (-3, 32), (4, 0), (4, 1), (40, 32), (4, 64), (4, 200)] {
            dmp.patchMargin = margin
            dmp.matchMaxBits = maxBits
            let patches = dmp.patchMake(text1, text2)
            let result = dmp.patchApply(patches, to: text1)
            #expect(!result.text.isEmpty, "margin \(margin) bits \(maxBits)")
        }
        dmp = DiffMatchPatch()
        dmp.diffTimeout = .infinity
        #expect(dmp.diffText2(dmp.diffMain(text1, text2)) == text2)
        dmp.diffTimeout = .nan
        #expect(dmp.diffText2(dmp.diffMain(text1, text2)) == text2)
        dmp.matchDistance = 0
        dmp.matchThreshold = 1
        #expect(dmp.matchMain(text1, "abX", 5) != nil)
    }
}
