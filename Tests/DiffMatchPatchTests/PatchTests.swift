import Testing
@testable import DiffMatchPatch

@Suite struct PatchTests {
    @Test func patchDescription() {
        let patch = Patch(diffs: [eq("jump"), del("s"), ins("ed"), eq(" over "), del("the"), ins("a"), eq("\nlaz")],
                          start1: 20, start2: 21, length1: 18, length2: 17)
        #expect(patch.description == "@@ -21,18 +22,17 @@\n jump\n-s\n+ed\n  over \n-the\n+a\n %0Alaz\n")
    }

    @Test func fromText() throws {
        let dmp = DiffMatchPatch()
        #expect(try dmp.patchFromText("") == [])
        let text = "@@ -21,18 +22,17 @@\n jump\n-s\n+ed\n  over \n-the\n+a\n %0Alaz\n"
        #expect(try dmp.patchFromText(text)[0].description == text)
        #expect(try dmp.patchFromText("@@ -1 +1 @@\n-a\n+b\n")[0].description == "@@ -1 +1 @@\n-a\n+b\n")
        #expect(try dmp.patchFromText("@@ -1,3 +0,0 @@\n-abc\n")[0].description == "@@ -1,3 +0,0 @@\n-abc\n")
        #expect(try dmp.patchFromText("@@ -0,0 +1,3 @@\n+abc\n")[0].description == "@@ -0,0 +1,3 @@\n+abc\n")
        #expect(throws: DiffMatchPatchError.invalidPatchText("Invalid patch string: Bad")) {
            try dmp.patchFromText("Bad\nPatch\n")
        }
        for bad in ["@@ -1 +1 @@\n*a\n", "@@ -1 +1 @@\n-%zz\n", "@@ -x +1 @@\n", "@@ -0 +1 @@\n", "@@ -1 +1@@\n",
                    "@@ -99999999999999999999999 +1 @@\n"] {
            #expect(throws: DiffMatchPatchError.self, "\(bad)") { try dmp.patchFromText(bad) }
        }
    }

    @Test func toText() throws {
        let dmp = DiffMatchPatch()
        var text = "@@ -21,18 +22,17 @@\n jump\n-s\n+ed\n  over \n-the\n+a\n  laz\n"
        #expect(dmp.patchToText(try dmp.patchFromText(text)) == text)
        text = "@@ -1,9 +1,9 @@\n-f\n+F\n oo+fooba\n@@ -7,9 +7,9 @@\n obar\n-,\n+.\n  tes\n"
        #expect(dmp.patchToText(try dmp.patchFromText(text)) == text)
    }

    private func withContext(_ patchText: String, _ text: String) throws -> String {
        let dmp = DiffMatchPatch()
        var patch = UnitPatch(try dmp.patchFromText(patchText)[0])
        dmp.addContext(&patch, units(text))
        return patch.patch.description
    }

    @Test func addContext() throws {
        #expect(try withContext("@@ -21,4 +21,10 @@\n-jump\n+somersault\n", "The quick brown fox jumps over the lazy dog.")
                == "@@ -17,12 +17,18 @@\n fox \n-jump\n+somersault\n s ov\n")
        #expect(try withContext("@@ -21,4 +21,10 @@\n-jump\n+somersault\n", "The quick brown fox jumps.")
                == "@@ -17,10 +17,16 @@\n fox \n-jump\n+somersault\n s.\n")
        #expect(try withContext("@@ -3 +3,2 @@\n-e\n+at\n", "The quick brown fox jumps.")
                == "@@ -1,7 +1,8 @@\n Th\n-e\n+at\n  qui\n")
        #expect(try withContext("@@ -3 +3,2 @@\n-e\n+at\n", "The quick brown fox jumps.  The quick brown fox crashes.")
                == "@@ -1,27 +1,28 @@\n Th\n-e\n+at\n  quick brown fox jumps. \n")
    }

    @Test func make() {
        let dmp = DiffMatchPatch()
        #expect(dmp.patchToText(dmp.patchMake("", "")) == "")
        let text1 = "The quick brown fox jumps over the lazy dog."
        let text2 = "That quick brown fox jumped over a lazy dog."
        // The second hunk is "-21,17 +21,18", not "-22,17 +21,18", because of rolling context.
        #expect(dmp.patchToText(dmp.patchMake(text2, text1))
                == "@@ -1,8 +1,7 @@\n Th\n-at\n+e\n  qui\n@@ -21,17 +21,18 @@\n jump\n-ed\n+s\n  over \n-a\n+the\n  laz\n")
        let expected = "@@ -1,11 +1,12 @@\n Th\n-e\n+at\n  quick b\n@@ -22,18 +22,17 @@\n jump\n-s\n+ed\n  over \n-the\n+a\n  laz\n"
        #expect(dmp.patchToText(dmp.patchMake(text1, text2)) == expected)
        let diffs = dmp.diffMain(text1, text2, checkLines: false)
        #expect(dmp.patchToText(dmp.patchMake(diffs)) == expected)
        #expect(dmp.patchToText(dmp.patchMake(text1, diffs)) == expected)

        let encoded = "@@ -1,21 +1,21 @@\n-%601234567890-=%5B%5D%5C;',./\n+~!@#$%25%5E&*()_+%7B%7D%7C:%22%3C%3E?\n"
        #expect(dmp.patchToText(dmp.patchMake("`1234567890-=[]\\;',./", "~!@#$%^&*()_+{}|:\"<>?")) == encoded)
        #expect((try? dmp.patchFromText(encoded))?.first?.diffs
                == [del("`1234567890-=[]\\;',./"), ins("~!@#$%^&*()_+{}|:\"<>?")])

        let repeated = String(repeating: "abcdef", count: 100)
        #expect(dmp.patchToText(dmp.patchMake(repeated, repeated + "123"))
                == "@@ -573,28 +573,31 @@\n cdefabcdefabcdefabcdefabcdef\n+123\n")
    }

    private func splitText(_ text1: String, _ text2: String) -> String {
        let dmp = DiffMatchPatch()
        var patches = dmp.patchMake(text1, text2).map(UnitPatch.init)
        dmp.splitMax(&patches)
        return dmp.patchToText(patches.map(\.patch))
    }

    @Test func splitMax() {
        #expect(splitText("abcdefghijklmnopqrstuvwxyz01234567890", "XabXcdXefXghXijXklXmnXopXqrXstXuvXwxXyzX01X23X45X67X89X0")
                == "@@ -1,32 +1,46 @@\n+X\n ab\n+X\n cd\n+X\n ef\n+X\n gh\n+X\n ij\n+X\n kl\n+X\n mn\n+X\n op\n+X\n qr\n+X\n st\n+X\n uv\n+X\n wx\n+X\n yz\n+X\n 012345\n@@ -25,13 +39,18 @@\n zX01\n+X\n 23\n+X\n 45\n+X\n 67\n+X\n 89\n+X\n 0\n")
        let dmp = DiffMatchPatch()
        let long = "abcdef1234567890123456789012345678901234567890123456789012345678901234567890uvwxyz"
        #expect(splitText(long, "abcdefuvwxyz") == dmp.patchToText(dmp.patchMake(long, "abcdefuvwxyz")))
        #expect(splitText("1234567890123456789012345678901234567890123456789012345678901234567890", "abc")
                == "@@ -1,32 +1,4 @@\n-1234567890123456789012345678\n 9012\n@@ -29,32 +1,4 @@\n-9012345678901234567890123456\n 7890\n@@ -57,14 +1,3 @@\n-78901234567890\n+abc\n")
        #expect(splitText("abcdefghij , h : 0 , t : 1 abcdefghij , h : 0 , t : 1 abcdefghij , h : 0 , t : 1",
                          "abcdefghij , h : 1 , t : 1 abcdefghij , h : 1 , t : 1 abcdefghij , h : 0 , t : 1")
                == "@@ -2,32 +2,32 @@\n bcdefghij , h : \n-0\n+1\n  , t : 1 abcdef\n@@ -29,32 +29,32 @@\n bcdefghij , h : \n-0\n+1\n  , t : 1 abcdef\n")
    }

    private func padded(_ text1: String, _ text2: String) -> (before: String, after: String) {
        let dmp = DiffMatchPatch()
        var patches = dmp.patchMake(text1, text2).map(UnitPatch.init)
        let before = dmp.patchToText(patches.map(\.patch))
        _ = dmp.addPadding(&patches)
        return (before, dmp.patchToText(patches.map(\.patch)))
    }

    @Test func addPadding() {
        var result = padded("", "test")
        #expect(result.before == "@@ -0,0 +1,4 @@\n+test\n")
        #expect(result.after == "@@ -1,8 +1,12 @@\n %01%02%03%04\n+test\n %01%02%03%04\n")
        result = padded("XY", "XtestY")
        #expect(result.before == "@@ -1,2 +1,6 @@\n X\n+test\n Y\n")
        #expect(result.after == "@@ -2,8 +2,12 @@\n %02%03%04X\n+test\n Y%01%02%03\n")
        result = padded("XXXXYYYY", "XXXXtestYYYY")
        #expect(result.before == "@@ -1,8 +1,12 @@\n XXXX\n+test\n YYYY\n")
        #expect(result.after == "@@ -5,8 +5,12 @@\n XXXX\n+test\n YYYY\n")
    }

    @Test func apply() {
        var dmp = DiffMatchPatch()
        dmp.matchDistance = 1000
        dmp.matchThreshold = 0.5
        dmp.patchDeleteThreshold = 0.5
        var patches = dmp.patchMake("", "")
        var result = dmp.patchApply(patches, to: "Hello world.")
        #expect(result.text == "Hello world." && result.applied == [])

        patches = dmp.patchMake("The quick brown fox jumps over the lazy dog.", "That quick brown fox jumped over a lazy dog.")
        result = dmp.patchApply(patches, to: "The quick brown fox jumps over the lazy dog.")
        #expect(result.text == "That quick brown fox jumped over a lazy dog." && result.applied == [true, true])
        result = dmp.patchApply(patches, to: "The quick red rabbit jumps over the tired tiger.")
        #expect(result.text == "That quick red rabbit jumped over a tired tiger." && result.applied == [true, true])
        result = dmp.patchApply(patches, to: "I am the very model of a modern major general.")
        #expect(result.text == "I am the very model of a modern major general." && result.applied == [false, false])

        let bigDelete = "x1234567890123456789012345678901234567890123456789012345678901234567890y"
        patches = dmp.patchMake(bigDelete, "xabcy")
        result = dmp.patchApply(patches, to: "x123456789012345678901234567890-----++++++++++-----123456789012345678901234567890y")
        #expect(result.text == "xabcy" && result.applied == [true, true])
        result = dmp.patchApply(patches, to: "x12345678901234567890---------------++++++++++---------------12345678901234567890y")
        #expect(result.text == "xabc12345678901234567890---------------++++++++++---------------12345678901234567890y")
        #expect(result.applied == [false, true])
        dmp.patchDeleteThreshold = 0.6
        patches = dmp.patchMake(bigDelete, "xabcy")
        result = dmp.patchApply(patches, to: "x12345678901234567890---------------++++++++++---------------12345678901234567890y")
        #expect(result.text == "xabcy" && result.applied == [true, true])
        dmp.patchDeleteThreshold = 0.5

        // Compensate for a failed patch.
        dmp.matchThreshold = 0
        dmp.matchDistance = 0
        patches = dmp.patchMake("abcdefghijklmnopqrstuvwxyz--------------------1234567890",
                                "abcXXXXXXXXXXdefghijklmnopqrstuvwxyz--------------------1234567YYYYYYYYYY890")
        result = dmp.patchApply(patches, to: "ABCDEFGHIJKLMNOPQRSTUVWXYZ--------------------1234567890")
        #expect(result.text == "ABCDEFGHIJKLMNOPQRSTUVWXYZ--------------------1234567YYYYYYYYYY890")
        #expect(result.applied == [false, true])
        dmp.matchThreshold = 0.5
        dmp.matchDistance = 1000

        // No side effects (patches are values; their text is unchanged after applying).
        patches = dmp.patchMake("", "test")
        var before = dmp.patchToText(patches)
        _ = dmp.patchApply(patches, to: "")
        #expect(dmp.patchToText(patches) == before)
        patches = dmp.patchMake("The quick brown fox jumps over the lazy dog.", "Woof")
        before = dmp.patchToText(patches)
        _ = dmp.patchApply(patches, to: "The quick brown fox jumps over the lazy dog.")
        #expect(dmp.patchToText(patches) == before)

        result = dmp.patchApply(dmp.patchMake("", "test"), to: "")
        #expect(result.text == "test" && result.applied == [true])
        result = dmp.patchApply(dmp.patchMake("XY", "XtestY"), to: "XY")
        #expect(result.text == "XtestY" && result.applied == [true])
        result = dmp.patchApply(dmp.patchMake("y", "y123"), to: "x")
        #expect(result.text == "x123" && result.applied == [true])
    }

    @Test func astralTextPatches() throws {
        let dmp = DiffMatchPatch()
        let text1 = "Emoji 😀😁😂 party 🎉 and more 🎉🎉 text"
        let text2 = "Emoji 😀😂😃 party 🎊 and more 🎉 text!"
        let patches = dmp.patchMake(text1, text2)
        let parsed = try dmp.patchFromText(dmp.patchToText(patches))
        #expect(parsed == patches)
        #expect(dmp.patchApply(patches, to: text1).text == text2)
        // Fuzzy: the same edits on a shifted copy.
        let shifted = "👋 " + text1
        let result = dmp.patchApply(patches, to: shifted)
        #expect(result.applied.allSatisfy { $0 })
        #expect(result.text == "👋 " + text2)
    }
}
