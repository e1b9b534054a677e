import Testing
@testable import DiffMatchPatch

@Suite struct MatchTests {
    @Test func alphabet() {
        let dmp = DiffMatchPatch()
        let a: UInt16 = 0x61, b: UInt16 = 0x62, c: UInt16 = 0x63
        #expect(dmp.matchAlphabet(units("abc")) == [a: 4, b: 2, c: 1])
        #expect(dmp.matchAlphabet(units("abcaba")) == [a: 37, b: 18, c: 8])
    }

    private func bitap(_ text: String, _ pattern: String, _ loc: Int, threshold: Double = 0.5, distance: Int = 100) -> Int? {
        var dmp = DiffMatchPatch()
        dmp.matchThreshold = threshold
        dmp.matchDistance = distance
        return dmp.bitap(units(text), units(pattern), loc)
    }

    @Test func bitap() {
        #expect(bitap("abcdefghijk", "fgh", 5) == 5)
        #expect(bitap("abcdefghijk", "fgh", 0) == 5)
        #expect(bitap("abcdefghijk", "efxhi", 0) == 4)
        #expect(bitap("abcdefghijk", "cdefxyhijk", 5) == 2)
        #expect(bitap("abcdefghijk", "bxy", 1) == nil)
        #expect(bitap("123456789xx0", "3456789x0", 2) == 2)
        #expect(bitap("abcdefghijk", "efxyhi", 1, threshold: 0.4) == 4)
        #expect(bitap("abcdefghijk", "efxyhi", 1, threshold: 0.3) == nil)
        #expect(bitap("abcdefghijk", "bcdef", 1, threshold: 0.0) == 1)
        #expect(bitap("abcdexyzabcde", "abccde", 3) == 0)
        #expect(bitap("abcdexyzabcde", "abccde", 5) == 8)
        #expect(bitap("abcdefghijklmnopqrstuvwxyz", "abcdefg", 24, distance: 10) == nil)
        #expect(bitap("abcdefghijklmnopqrstuvwxyz", "abcdxxefg", 1, distance: 10) == 0)
        #expect(bitap("abcdefghijklmnopqrstuvwxyz", "abcdefg", 24, distance: 1000) == 0)
    }

    @Test func matchMain() {
        let dmp = DiffMatchPatch()
        #expect(dmp.matchMain("abcdef", "abcdef", 1000) == 0)
        #expect(dmp.matchMain("", "abcdef", 1) == nil)
        #expect(dmp.matchMain("abcdef", "", 3) == 3)
        #expect(dmp.matchMain("abcdef", "de", 3) == 3)
        #expect(dmp.matchMain("abcdef", "defy", 4) == 3)
        #expect(dmp.matchMain("abcdef", "abcdefy", 0) == 0)
        #expect(dmp.matchMain("I am the very model of a modern major general.", " that berry ", 5) == 4)
        // Longer than the bit masks and not present exactly: no match rather than the reference's throw.
        #expect(dmp.matchMain(String(repeating: "ab", count: 40), String(repeating: "xy", count: 40), 0) == nil)
    }
}
