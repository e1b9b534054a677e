import Testing
import DiffMatchPatch

@Suite struct DeltaTests {
    let dmp = DiffMatchPatch()

    @Test func roundTrip() throws {
        let diffs = [eq("jump"), del("s"), ins("ed"), eq(" over "), del("the"), ins("a"), eq(" lazy"), ins("old dog")]
        let text1 = dmp.diffText1(diffs)
        #expect(text1 == "jumps over the lazy")
        let delta = dmp.diffToDelta(diffs)
        #expect(delta == "=4\t-1\t+ed\t=6\t-3\t+a\t=5\t+old dog")
        #expect(try dmp.diffFromDelta(text1, delta) == diffs)
    }

    @Test func lengthMismatchIsAnError() {
        let delta = "=4\t-1\t+ed\t=6\t-3\t+a\t=5\t+old dog"
        #expect(throws: DiffMatchPatchError.deltaLengthMismatch(expected: 20, actual: 19)) {
            try dmp.diffFromDelta("jumps over the lazyx", delta)
        }
        #expect(throws: DiffMatchPatchError.deltaLengthMismatch(expected: 18, actual: 19)) {
            try dmp.diffFromDelta("umps over the lazy", delta)
        }
        // Far past the end, and counts that would overflow, still fail cleanly.
        #expect(throws: DiffMatchPatchError.deltaLengthMismatch(expected: 3, actual: 1_000_000)) {
            try dmp.diffFromDelta("abc", "=1000000")
        }
        #expect(throws: DiffMatchPatchError.self) {
            try dmp.diffFromDelta("abc", "=\(Int.max)\t=\(Int.max)")
        }
        // Counts are UTF-16 units: an emoji is 2.
        #expect(throws: DiffMatchPatchError.deltaLengthMismatch(expected: 2, actual: 1)) {
            try dmp.diffFromDelta("😀", "=1")
        }
    }

    @Test func malformedDeltas() {
        for bad in ["+%c3%xy", "+%", "+%4", "+%C3", "+%C3%28", "+%C0%80", "+%F5%80%80%80"] {
            #expect(throws: DiffMatchPatchError.self, "\(bad)") { try dmp.diffFromDelta("", bad) }
        }
        for bad in ["=x", "-", "=-1", "=1.5", "= 1", "*3", "x"] {
            #expect(throws: DiffMatchPatchError.self, "\(bad)") { try dmp.diffFromDelta("abc", bad) }
        }
        #expect(throws: DiffMatchPatchError.invalidDelta("Invalid diff operation in delta: *")) {
            try dmp.diffFromDelta("abc", "*3")
        }
    }

    @Test func blankTokensAreSkipped() throws {
        #expect(try dmp.diffFromDelta("abc", "=1\t\t-2\t") == [eq("a"), del("bc")])
        #expect(try dmp.diffFromDelta("", "") == [])
    }

    @Test func specialCharacters() throws {
        let diffs = [eq("\u{0680} \u{0} \t %"), del("\u{0681} \u{1} \n ^"), ins("\u{0682} \u{2} \\ |")]
        let text1 = dmp.diffText1(diffs)
        #expect(text1 == "\u{0680} \u{0} \t %\u{0681} \u{1} \n ^")
        let delta = dmp.diffToDelta(diffs)
        #expect(delta == "=7\t-7\t+%DA%82 %02 %5C %7C")
        #expect(try dmp.diffFromDelta(text1, delta) == diffs)
        #expect(dmp.diffToDelta([eq("3\n"), ins("4\n")]) == "=2\t+4%0A")
    }

    @Test func javaScriptEscapingSet() throws {
        let diffs = [ins("A-Z a-z 0-9 - _ . ! ~ * ' ( ) ; / ? : @ & = + $ , # ")]
        let delta = dmp.diffToDelta(diffs)
        #expect(delta == "+A-Z a-z 0-9 - _ . ! ~ * ' ( ) ; / ? : @ & = + $ , # ")
        #expect(try dmp.diffFromDelta("", delta) == diffs)
        #expect(dmp.diffToDelta([ins("%\"<>[]^`{|}\u{7F}é€😀")]) == "+%25%22%3C%3E%5B%5D%5E%60%7B%7C%7D%7F%C3%A9%E2%82%AC%F0%9F%98%80")
        // Escapes encodeURI would not produce still decode (as the Java and Python ports do); + is a plus.
        #expect(try dmp.diffFromDelta("", "+%23%2B%20+") == [ins("#+ +")])
    }

    @Test func largeInsert() throws {
        var a = "abcdefghij"
        for _ in 0..<14 { a += a }
        let diffs = [ins(a)]
        let delta = dmp.diffToDelta(diffs)
        #expect(delta == "+" + a)
        #expect(try dmp.diffFromDelta("", delta) == diffs)
    }

    @Test func emptyRunsAreSkipped() {
        #expect(dmp.diffToDelta([eq("abcdef"), del(""), ins("ghijk")]) == dmp.diffToDelta([eq("abcdef"), ins("ghijk")]))
    }

    @Test func surrogatePairsStayWhole() throws {
        // Reference cases for astral characters (later JavaScript version of the suite).
        #expect(dmp.diffToDelta(dmp.diffMain("🅰🅱", "🅱🅰🅱")) == dmp.diffToDelta([ins("🅱"), eq("🅰🅱")]))
        #expect(dmp.diffToDelta(dmp.diffMain("🅰🅱", "🅰🅰🅱")) == dmp.diffToDelta([eq("🅰"), ins("🅰"), eq("🅱")]))
        #expect(dmp.diffToDelta(dmp.diffMain("🅱🅰🅱", "🅰🅱")) == dmp.diffToDelta([del("🅱"), eq("🅰🅱")]))
        #expect(dmp.diffToDelta(dmp.diffMain("🅰🅲🅱", "🅰🅱")) == dmp.diffToDelta([eq("🅰"), del("🅲"), eq("🅱")]))
        #expect(dmp.diffMain("a😀b", "a😁b") == [eq("a"), del("😀"), ins("😁"), eq("b")])
        #expect(dmp.diffToDelta(dmp.diffMain("😀", "😁")) == "-2\t+%F0%9F%98%81")
    }

    @Test func surrogateHalvesFromOtherPortsDecode() throws {
        // Another port split the pair: =1 keeps the high half, the low half is escaped on its own
        // (CESU-8 style). The result is the same as the whole-character delta.
        let whole = try dmp.diffFromDelta("🅰", "-2\t+%F0%9F%85%B1")
        let split = try dmp.diffFromDelta("🅰", "=1\t-1\t+%ED%B5%B1")
        #expect(whole == [del("🅰"), ins("🅱")])
        #expect(split == whole)
        #expect(dmp.diffToDelta(split) == "-2\t+%F0%9F%85%B1")
        // Both halves escaped separately, and JavaScript escape()-style halves.
        #expect(try dmp.diffFromDelta("", "+%ED%A0%BD%ED%B8%80") == [ins("😀")])
        #expect(try dmp.diffFromDelta("", "+%uD83D%uDE00") == [ins("😀")])
        // An insert that straddles the pair is regrouped to whole characters, keeping equal ones equal.
        let straddling = try dmp.diffFromDelta("🙋🙋", "=3\t+%ED%B9%8C%ED%A0%BD\t=1")
        #expect(dmp.diffToDelta(straddling) == "=2\t+%F0%9F%99%8C\t=2")
        #expect(dmp.diffText2(straddling) == "🙋🙌🙋")
    }
}
