import Testing
import DiffMatchPatch

@Suite struct DiffCleanupTests {
    let dmp = DiffMatchPatch()

    private func merged(_ input: [Diff]) -> [Diff] {
        var diffs = input
        dmp.diffCleanupMerge(&diffs)
        return diffs
    }

    @Test func cleanupMerge() {
        #expect(merged([]) == [])
        #expect(merged([eq("a"), del("b"), ins("c")]) == [eq("a"), del("b"), ins("c")])
        #expect(merged([eq("a"), eq("b"), eq("c")]) == [eq("abc")])
        #expect(merged([del("a"), del("b"), del("c")]) == [del("abc")])
        #expect(merged([ins("a"), ins("b"), ins("c")]) == [ins("abc")])
        #expect(merged([del("a"), ins("b"), del("c"), ins("d"), eq("e"), eq("f")]) == [del("ac"), ins("bd"), eq("ef")])
        #expect(merged([del("a"), ins("abc"), del("dc")]) == [eq("a"), del("d"), ins("b"), eq("c")])
        #expect(merged([eq("x"), del("a"), ins("abc"), del("dc"), eq("y")]) == [eq("xa"), del("d"), ins("b"), eq("cy")])
        #expect(merged([eq("a"), ins("ba"), eq("c")]) == [ins("ab"), eq("ac")])
        #expect(merged([eq("c"), ins("ab"), eq("a")]) == [eq("ca"), ins("ba")])
        #expect(merged([eq("a"), del("b"), eq("c"), del("ac"), eq("x")]) == [del("abc"), eq("acx")])
        #expect(merged([eq("x"), del("ca"), eq("c"), del("b"), eq("a")]) == [eq("xca"), del("cba")])
        #expect(merged([del("b"), ins("ab"), eq("c")]) == [ins("a"), eq("bc")])
        #expect(merged([eq(""), ins("a"), eq("b")]) == [ins("a"), eq("b")])
    }

    private func lossless(_ input: [Diff]) -> [Diff] {
        var diffs = input
        dmp.diffCleanupSemanticLossless(&diffs)
        return diffs
    }

    @Test func cleanupSemanticLossless() {
        #expect(lossless([]) == [])
        #expect(lossless([eq("AAA\r\n\r\nBBB"), ins("\r\nDDD\r\n\r\nBBB"), eq("\r\nEEE")])
                == [eq("AAA\r\n\r\n"), ins("BBB\r\nDDD\r\n\r\n"), eq("BBB\r\nEEE")])
        #expect(lossless([eq("AAA\r\nBBB"), ins(" DDD\r\nBBB"), eq(" EEE")])
                == [eq("AAA\r\n"), ins("BBB DDD\r\n"), eq("BBB EEE")])
        #expect(lossless([eq("The c"), ins("ow and the c"), eq("at.")]) == [eq("The "), ins("cow and the "), eq("cat.")])
        #expect(lossless([eq("The-c"), ins("ow-and-the-c"), eq("at.")]) == [eq("The-"), ins("cow-and-the-"), eq("cat.")])
        #expect(lossless([eq("a"), del("a"), eq("ax")]) == [del("a"), eq("aax")])
        #expect(lossless([eq("xa"), del("a"), eq("a")]) == [eq("xaa"), del("a")])
        #expect(lossless([eq("The xxx. The "), ins("zzz. The "), eq("yyy.")])
                == [eq("The xxx."), ins(" The zzz."), eq(" The yyy.")])
    }

    private func semantic(_ input: [Diff]) -> [Diff] {
        var diffs = input
        dmp.diffCleanupSemantic(&diffs)
        return diffs
    }

    @Test func cleanupSemantic() {
        #expect(semantic([]) == [])
        #expect(semantic([del("ab"), ins("cd"), eq("12"), del("e")]) == [del("ab"), ins("cd"), eq("12"), del("e")])
        #expect(semantic([del("abc"), ins("ABC"), eq("1234"), del("wxyz")])
                == [del("abc"), ins("ABC"), eq("1234"), del("wxyz")])
        #expect(semantic([del("a"), eq("b"), del("c")]) == [del("abc"), ins("b")])
        #expect(semantic([del("ab"), eq("cd"), del("e"), eq("f"), ins("g")]) == [del("abcdef"), ins("cdfg")])
        #expect(semantic([ins("1"), eq("A"), del("B"), ins("2"), eq("_"), ins("1"), eq("A"), del("B"), ins("2")])
                == [del("AB_AB"), ins("1A2_1A2")])
        #expect(semantic([eq("The c"), del("ow and the c"), eq("at.")]) == [eq("The "), del("cow and the "), eq("cat.")])
        #expect(semantic([del("abcxx"), ins("xxdef")]) == [del("abcxx"), ins("xxdef")])
        #expect(semantic([del("abcxxx"), ins("xxxdef")]) == [del("abc"), eq("xxx"), ins("def")])
        #expect(semantic([del("xxxabc"), ins("defxxx")]) == [ins("def"), eq("xxx"), del("abc")])
        #expect(semantic([del("abcd1212"), ins("1212efghi"), eq("----"), del("A3"), ins("3BC")])
                == [del("abcd"), eq("1212"), ins("efghi"), eq("----"), del("A"), eq("3"), ins("BC")])
    }

    private func efficiency(_ input: [Diff], cost: Int = 4) -> [Diff] {
        var dmp = DiffMatchPatch()
        dmp.diffEditCost = cost
        var diffs = input
        dmp.diffCleanupEfficiency(&diffs)
        return diffs
    }

    @Test func cleanupEfficiency() {
        #expect(efficiency([]) == [])
        #expect(efficiency([del("ab"), ins("12"), eq("wxyz"), del("cd"), ins("34")])
                == [del("ab"), ins("12"), eq("wxyz"), del("cd"), ins("34")])
        #expect(efficiency([del("ab"), ins("12"), eq("xyz"), del("cd"), ins("34")]) == [del("abxyzcd"), ins("12xyz34")])
        #expect(efficiency([ins("12"), eq("x"), del("cd"), ins("34")]) == [del("xcd"), ins("12x34")])
        #expect(efficiency([del("ab"), ins("12"), eq("xy"), ins("34"), eq("z"), del("cd"), ins("56")])
                == [del("abxyzcd"), ins("12xy34z56")])
        #expect(efficiency([del("ab"), ins("12"), eq("wxyz"), del("cd"), ins("34")], cost: 5)
                == [del("abwxyzcd"), ins("12wxyz34")])
    }
}
