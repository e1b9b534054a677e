@testable import DiffMatchPatch
import Testing

/// The code-unit shortcuts (UTF-8 transcoding, the delta scanner, `semanticDelta`, `applyDelta`)
/// against the public, String-based steps they stand for.
struct FastPathTests {
    /// Strings whose non-ASCII characters and escapes fall on and around 8-byte word boundaries.
    static let samples: [String] = {
        var samples = ["", "a", "abcdefgh", "abcdefghi", "🙂", "é", "e\u{301}", "\u{FEFF}x", "中文中文中文中文"]
        for position in 0..<18 {
            let prefix = String(repeating: "x", count: position)
            for special in ["🙂", "é", "中", "\u{0}", "%", "\t", "\r\n", "👍🏽"] {
                samples.append(prefix + special + "tail of some length")
            }
        }
        return samples
    }()

    @Test func transcodingMatchesTheUTF16View() {
        for sample in Self.samples {
            #expect(utf16Units(sample) == Array(sample.utf16), "\(sample.debugDescription)")
            #expect(utf16Count(sample) == sample.utf16.count, "\(sample.debugDescription)")
            #expect(makeString(utf16Units(sample)) == sample)
        }
    }

    @Test func utf8OffsetsRefuseToSplitASurrogatePair() {
        var text = "ab🙂cdefghijklmnop🙂"
        text.withUTF8 { bytes in
            #expect(utf8Offset(advancing: 2, from: 0, in: bytes) == 2)
            #expect(utf8Offset(advancing: 3, from: 0, in: bytes) == nil)  // inside the first emoji
            #expect(utf8Offset(advancing: 4, from: 0, in: bytes) == 6)
            #expect(utf8Offset(advancing: 18, from: 0, in: bytes) == 20)
            #expect(utf8Offset(advancing: 19, from: 0, in: bytes) == nil)
            #expect(utf8Offset(advancing: 20, from: 0, in: bytes) == 24)
            #expect(utf8Offset(advancing: 21, from: 0, in: bytes) == nil)  // past the end
        }
    }

    @Test func semanticDeltaMatchesThePublicSteps() {
        let dmp = DiffMatchPatch()
        for (index, a) in Self.samples.enumerated() {
            for b in [Self.samples[(index * 7 + 3) % Self.samples.count], a + "!", "x" + a, String(a.reversed())] {
                var diffs = dmp.diffMain(a, b)
                dmp.diffCleanupSemantic(&diffs)
                #expect(dmp.semanticDelta(from: a, to: b) == dmp.diffToDelta(diffs), "\(a.debugDescription) -> \(b.debugDescription)")
            }
        }
    }

    func publicApply(_ dmp: DiffMatchPatch, _ delta: String, _ text: String) -> Result<String, DiffMatchPatchError> {
        Result { () throws(DiffMatchPatchError) in dmp.diffText2(try dmp.diffFromDelta(text, delta)) }
    }

    @Test func applyDeltaMatchesThePublicSteps() {
        let dmp = DiffMatchPatch()
        let cases: [(String, String)] = [
            ("abc", "=1\t-1\t+x%20y\t=1"),
            ("🙂", "=1\t+x\t=1"),              // cuts the pair: the repairing path
            ("a🙂b", "=2\t-2"),
            ("a🙂b", "=1\t-1\t+%uD83D\t=2"),
            ("🙂🙂", "-1\t+%ED%A0%BD\t=3"),
            ("abc", "=1\t+é\t=2"),              // non-ASCII right after the operation
            ("abc", "=\u{301}3"),
            ("abc", "+\u{301}x\t=3"),
            ("abc", "=4"),
            ("abc", "=2"),
            ("abc", "=99999999999999999999"),
            ("abc", "=3\t\t"),
            ("abc", "\t=3"),
            ("abc", "=01\t=2"),
            ("abc", "=+1\t=2"),
            ("abc", "x3"),
            ("abc", "+%G1\t=3"),
            ("abc", "+%\t=3"),
            ("", "+%F0%9F%99%82"),
            ("", ""),
            ("abc", "-3"),
        ]
        for (text, delta) in cases {
            let fast = Result { () throws(DiffMatchPatchError) in try dmp.applyDelta(delta, to: text) }
            #expect(fast == publicApply(dmp, delta, text), "\(text.debugDescription) \(delta.debugDescription)")
        }
        for (index, a) in Self.samples.enumerated() {
            let b = Self.samples[(index * 5 + 1) % Self.samples.count] + a
            let delta = dmp.semanticDelta(from: a, to: b)
            #expect((try? dmp.applyDelta(delta, to: a)) == b)
            #expect(Result { () throws(DiffMatchPatchError) in try dmp.applyDelta(delta, to: a) } == publicApply(dmp, delta, a))
        }
    }
}
