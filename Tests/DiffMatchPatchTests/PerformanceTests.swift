import Testing
import DiffMatchPatch

@Suite struct PerformanceTests {
    /// 100 KB of text lines with scattered edits: must stay well inside the 1 s diff timeout even
    /// in a debug build (release is tens of milliseconds), and reproduce both texts.
    @Test func largeTextsWithScatteredEdits() throws {
        var generator = SplitMix(seed: 42)
        let words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa", "😀"]
        var lines: [String] = []
        var size = 0
        while size < 100_000 {
            let line = (0..<8).map { _ in words[Int(generator.next() % UInt64(words.count))] }.joined(separator: " ")
            lines.append(line)
            size += line.utf8.count + 1
        }
        var edited = lines
        for _ in 0..<40 {
            let index = Int(generator.next() % UInt64(edited.count))
            edited[index] = "changed \(generator.next() % 1000) " + edited[index].dropFirst(3)
        }
        let text1 = lines.joined(separator: "\n")
        let text2 = edited.joined(separator: "\n")

        var dmp = DiffMatchPatch()
        dmp.diffTimeout = 0
        let clock = ContinuousClock()
        var diffs: [Diff] = []
        let elapsed = clock.measure { diffs = dmp.diffMain(text1, text2) }
        #expect(elapsed < .seconds(2), "diffMain took \(elapsed)")
        #expect(dmp.diffText1(diffs) == text1)
        #expect(dmp.diffText2(diffs) == text2)

        let delta = dmp.diffToDelta(diffs)
        #expect(try dmp.diffFromDelta(text1, delta) == diffs)

        let patchElapsed = clock.measure {
            let patches = dmp.patchMake(text1, text2)
            #expect(dmp.patchApply(patches, to: text1).text == text2)
        }
        #expect(patchElapsed < .seconds(5), "patchMake + patchApply took \(patchElapsed)")
    }
}

/// Deterministic generator so the test text is the same on every run.
struct SplitMix {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
