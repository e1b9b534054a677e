import Testing
@testable import DiffMatchPatch

@Suite struct DiffMainTests {
    @Test func texts() {
        let dmp = DiffMatchPatch()
        let diffs = [eq("jump"), del("s"), ins("ed"), eq(" over "), del("the"), ins("a"), eq(" lazy")]
        #expect(dmp.diffText1(diffs) == "jumps over the lazy")
        #expect(dmp.diffText2(diffs) == "jumped over a lazy")
    }

    @Test func xIndex() {
        let dmp = DiffMatchPatch()
        #expect(dmp.diffXIndex([del("a"), ins("1234"), eq("xyz")], 2) == 5)
        #expect(dmp.diffXIndex([eq("a"), del("1234"), eq("xyz")], 3) == 1)
    }

    @Test func levenshtein() {
        let dmp = DiffMatchPatch()
        #expect(dmp.diffLevenshtein([del("abc"), ins("1234"), eq("xyz")]) == 4)
        #expect(dmp.diffLevenshtein([eq("xyz"), del("abc"), ins("1234")]) == 4)
        #expect(dmp.diffLevenshtein([del("abc"), eq("xyz"), ins("1234")]) == 7)
    }

    @Test func bisect() {
        let dmp = DiffMatchPatch()
        #expect(diffs(dmp.bisect(units("cat"), units("map"), deadline: nil))
                == [del("c"), ins("m"), eq("a"), del("t"), ins("p")])
        let expired = ContinuousClock.now.advanced(by: .seconds(-1))
        #expect(diffs(dmp.bisect(units("cat"), units("map"), deadline: expired)) == [del("cat"), ins("map")])
    }

    @Test func trivialDiffs() {
        let dmp = DiffMatchPatch()
        #expect(dmp.diffMain("", "", checkLines: false) == [])
        #expect(dmp.diffMain("abc", "abc", checkLines: false) == [eq("abc")])
        #expect(dmp.diffMain("abc", "ab123c", checkLines: false) == [eq("ab"), ins("123"), eq("c")])
        #expect(dmp.diffMain("a123bc", "abc", checkLines: false) == [eq("a"), del("123"), eq("bc")])
        #expect(dmp.diffMain("abc", "a123b456c", checkLines: false)
                == [eq("a"), ins("123"), eq("b"), ins("456"), eq("c")])
        #expect(dmp.diffMain("a123b456c", "abc", checkLines: false)
                == [eq("a"), del("123"), eq("b"), del("456"), eq("c")])
    }

    @Test func realDiffsWithoutTimeout() {
        var dmp = DiffMatchPatch()
        dmp.diffTimeout = 0
        #expect(dmp.diffMain("a", "b", checkLines: false) == [del("a"), ins("b")])
        #expect(dmp.diffMain("Apples are a fruit.", "Bananas are also fruit.", checkLines: false)
                == [del("Apple"), ins("Banana"), eq("s are a"), ins("lso"), eq(" fruit.")])
        #expect(dmp.diffMain("ax\t", "\u{0680}x\u{0}", checkLines: false)
                == [del("a"), ins("\u{0680}"), eq("x"), del("\t"), ins("\u{0}")])
        #expect(dmp.diffMain("1ayb2", "abxab", checkLines: false)
                == [del("1"), eq("a"), del("y"), eq("b"), del("2"), ins("xab")])
        #expect(dmp.diffMain("abcy", "xaxcxabc", checkLines: false) == [ins("xaxcx"), eq("abc"), del("y")])
        #expect(dmp.diffMain("ABCDa=bcd=efghijklmnopqrsEFGHIJKLMNOefg", "a-bcd-efghijklmnopqrs", checkLines: false)
                == [del("ABCD"), eq("a"), del("="), ins("-"), eq("bcd"), del("="), ins("-"),
                    eq("efghijklmnopqrs"), del("EFGHIJKLMNOefg")])
        #expect(dmp.diffMain("a [[Pennsylvania]] and [[New", " and [[Pennsylvania]]", checkLines: false)
                == [ins(" "), eq("a"), ins("nd"), eq(" [[Pennsylvania]]"), del(" and [[New")])
    }

    @Test func timeoutIsHonoured() {
        var dmp = DiffMatchPatch()
        dmp.diffTimeout = 0.1
        var a = "`Twas brillig, and the slithy toves\nDid gyre and gimble in the wabe:\nAll mimsy were the borogoves,\nAnd the mome raths outgrabe.\n"
        var b = "I am the very model of a modern major general,\nI've information vegetable, animal, and mineral,\nI know the kings of England, and I quote the fights historical,\nFrom Marathon to Waterloo, in order categorical.\n"
        for _ in 0..<10 {
            a += a
            b += b
        }
        let clock = ContinuousClock()
        var result: [Diff] = []
        let elapsed = clock.measure { result = dmp.diffMain(a, b) }
        #expect(elapsed >= .milliseconds(100))
        // The reference allows twice the timeout; debug builds get slack for the cleanup after it.
        #expect(elapsed < .seconds(3))
        #expect(dmp.diffText1(result) == a)
        #expect(dmp.diffText2(result) == b)
    }

    @Test func lineModeMatchesCharacterMode() {
        var dmp = DiffMatchPatch()
        dmp.diffTimeout = 0
        var a = String(repeating: "1234567890\n", count: 13)
        var b = String(repeating: "abcdefghij\n", count: 13)
        #expect(dmp.diffMain(a, b, checkLines: false) == dmp.diffMain(a, b, checkLines: true))

        a = String(repeating: "1234567890", count: 13)
        b = String(repeating: "abcdefghij", count: 13)
        #expect(dmp.diffMain(a, b, checkLines: false) == dmp.diffMain(a, b, checkLines: true))

        a = String(repeating: "1234567890\n", count: 13)
        b = "abcdefghij\n1234567890\n1234567890\n1234567890\nabcdefghij\n1234567890\n1234567890\n1234567890\nabcdefghij\n1234567890\n1234567890\n1234567890\nabcdefghij\n"
        let lineMode = dmp.diffMain(a, b, checkLines: true)
        let charMode = dmp.diffMain(a, b, checkLines: false)
        #expect(dmp.diffText1(lineMode) == dmp.diffText1(charMode))
        #expect(dmp.diffText2(lineMode) == dmp.diffText2(charMode))
    }
}
