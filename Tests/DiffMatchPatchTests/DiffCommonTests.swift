import PropertyBased
import Testing
@testable import DiffMatchPatch

@Suite struct DiffCommonTests {
    @Test func commonPrefix() {
        #expect(UnitSearch.commonPrefix(units("abc"), units("xyz")) == 0)
        #expect(UnitSearch.commonPrefix(units("1234abcdef"), units("1234xyz")) == 4)
        #expect(UnitSearch.commonPrefix(units("1234"), units("1234xyz")) == 4)
    }

    @Test func commonSuffix() {
        #expect(UnitSearch.commonSuffix(units("abc"), units("xyz")) == 0)
        #expect(UnitSearch.commonSuffix(units("abcdef1234"), units("xyz1234")) == 4)
        #expect(UnitSearch.commonSuffix(units("1234"), units("xyz1234")) == 4)
    }

    @Test func commonOverlap() {
        #expect(UnitSearch.commonOverlap(units(""), units("abcd")) == 0)
        #expect(UnitSearch.commonOverlap(units("abc"), units("abcd")) == 3)
        #expect(UnitSearch.commonOverlap(units("123456"), units("abcd")) == 0)
        #expect(UnitSearch.commonOverlap(units("123456xxx"), units("xxxabcd")) == 3)
        // Ligatures are not their letters: U+FB01 is not "fi".
        #expect(UnitSearch.commonOverlap(units("fi"), units("\u{FB01}i")) == 0)
    }

    private func halfMatch(_ dmp: DiffMatchPatch, _ a: String, _ b: String) -> [String]? {
        guard let match = dmp.halfMatch(units(a), units(b)) else { return nil }
        return [match.text1A, match.text1B, match.text2A, match.text2B, match.common].map(string)
    }

    @Test func halfMatch() {
        var dmp = DiffMatchPatch()
        dmp.diffTimeout = 1
        #expect(halfMatch(dmp, "1234567890", "abcdef") == nil)
        #expect(halfMatch(dmp, "12345", "23") == nil)
        #expect(halfMatch(dmp, "1234567890", "a345678z") == ["12", "90", "a", "z", "345678"])
        #expect(halfMatch(dmp, "a345678z", "1234567890") == ["a", "z", "12", "90", "345678"])
        #expect(halfMatch(dmp, "abc56789z", "1234567890") == ["abc", "z", "1234", "0", "56789"])
        #expect(halfMatch(dmp, "a23456xyz", "1234567890") == ["a", "xyz", "1", "7890", "23456"])
        #expect(halfMatch(dmp, "121231234123451234123121", "a1234123451234z")
                == ["12123", "123121", "a", "z", "1234123451234"])
        #expect(halfMatch(dmp, "x-=-=-=-=-=-=-=-=-=-=-=-=", "xx-=-=-=-=-=-=-=")
                == ["", "-=-=-=-=-=", "x", "", "x-=-=-=-=-=-=-="])
        #expect(halfMatch(dmp, "-=-=-=-=-=-=-=-=-=-=-=-=y", "-=-=-=-=-=-=-=yy")
                == ["-=-=-=-=-=", "", "", "y", "-=-=-=-=-=-=-=y"])
        // Non-optimal half match, accepted for speed.
        #expect(halfMatch(dmp, "qHilloHelloHew", "xHelloHeHulloy") == ["qHillo", "w", "x", "Hulloy", "HelloHe"])
        // Without a time limit the optimal diff is wanted, so no half match.
        dmp.diffTimeout = 0
        #expect(halfMatch(dmp, "qHilloHelloHew", "xHelloHeHulloy") == nil)
    }

    @Test func linesToChars() {
        var encoding = LineEncoding(units("alpha\nbeta\nalpha\n"), units("beta\nalpha\nbeta\n"))
        #expect(encoding.chars1 == [1, 2, 1])
        #expect(encoding.chars2 == [2, 1, 2])
        #expect(encoding.lines.map { string(Array($0)) } == ["", "alpha\n", "beta\n"])

        encoding = LineEncoding(units(""), units("alpha\r\nbeta\r\n\r\n\r\n"))
        #expect(encoding.chars1 == [])
        #expect(encoding.chars2 == [1, 2, 3, 3])
        #expect(encoding.lines.map { string(Array($0)) } == ["", "alpha\r\n", "beta\r\n", "\r\n"])

        encoding = LineEncoding(units("a"), units("b"))
        #expect(encoding.chars1 == [1])
        #expect(encoding.chars2 == [2])

        // More than 256 lines, to reveal any 8-bit limitation.
        let lines = (1...300).map { "\($0)\n" }
        encoding = LineEncoding(units(lines.joined()), [])
        #expect(encoding.chars1 == (1...300).map { UInt16($0) })
        #expect(encoding.lines.map { string(Array($0)) } == [""] + lines)
    }

    @Test func charsToLines() {
        let encoding = LineEncoding(units("alpha\nbeta\nalpha\n"), units("beta\nalpha\nbeta\n"))
        var unitDiffs = [UnitDiff(.equal, encoding.chars1), UnitDiff(.insert, encoding.chars2)]
        encoding.decode(&unitDiffs)
        #expect(diffs(unitDiffs) == [eq("alpha\nbeta\nalpha\n"), ins("beta\nalpha\nbeta\n")])

        // More than 65536 lines: the text past the code limit becomes one line, losing nothing.
        let text = (0..<66000).map { "\($0)\n" }.joined()
        let big = LineEncoding(units(text), [])
        var bigDiffs = [UnitDiff(.insert, big.chars1)]
        big.decode(&bigDiffs)
        #expect(string(bigDiffs[0].text) == text)
    }
}

@Suite struct UnitSearchTests {
    static let text = Gen<Character?>.element(of: ["a", "b", "c", "Ă", "ȁ"] as [Character]).map { $0 ?? "a" }.string(of: 0...40)
    static let pattern = Gen<Character?>.element(of: ["a", "b", "c", "Ă", "ȁ"] as [Character]).map { $0 ?? "a" }.string(of: 0...5)

    /// The skip-table searches agree with a plain scan (units 0x0102 and 0x0201 share low bytes
    /// with others on purpose).
    @Test func searchesAgreeWithNaiveScan() async {
        await propertyCheck(count: 500, input: Self.text, Self.pattern, Gen.int(in: -2...45)) { text, pattern, from in
            let t = units(text), p = units(pattern)
            let candidates = t.count >= p.count ? Array(0...(t.count - p.count)) : []
            let hits = candidates.filter { Array(t[$0..<($0 + p.count)]) == p }
            let expectedFirst = p.isEmpty ? min(max(from, 0), t.count) : hits.first { $0 >= max(from, 0) }
            let expectedLast = hits.last { $0 <= max(from, 0) }  // JavaScript clamps a negative start to 0
            #expect(UnitSearch.indexOf(t, p, from: from) == expectedFirst)
            if !p.isEmpty { #expect(UnitSearch.lastIndexOf(t, p, from: from) == expectedLast) }
        }
    }
}
