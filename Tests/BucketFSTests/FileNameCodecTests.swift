import BucketFS
import Testing

/// Key <-> file name mapping (DESIGN.md: reversible percent-encoding) and scratch rules.
struct FileNameCodecTests {
    @Test(arguments: [
        ("plain-key_1.2@x", "plain-key_1.2@x"), ("a/b", "a%2Fb"), (".hidden", "%2Ehidden"), ("a.b", "a.b"),
        ("100%", "100%25"), ("sp ace", "sp%20ace"), ("é", "%C3%A9"), ("..", "%2E."),
    ])
    func encodesAndDecodes(name: String, fileName: String) {
        #expect(FileNameCodec.encode(name) == fileName)
        #expect(FileNameCodec.decode(fileName) == name)
    }

    @Test(arguments: ["%41", "%2e", "%", "%G1", "a%2", "%FF", ""])
    func rejectsNonCanonicalNames(fileName: String) {
        #expect(FileNameCodec.decode(fileName) == nil)
    }

    @Test func classifiesNames() {
        #expect(FileNameCodec.itemName(forFileName: "note.json") == .entity(key: "note"))
        #expect(FileNameCodec.itemName(forFileName: "a%2Fb.json") == .entity(key: "a/b"))
        for local in [".note.json.swp", "note.json~", ".#note.json", "4913", ".note.json.Ab12Cd", "x.txt", ".json", "%41.json"] {
            #expect(FileNameCodec.itemName(forFileName: local) == .localFile(name: local), "\(local)")
        }
    }

    @Test func roundTripsArbitraryUnicode() {
        for name in ["🙂/x", "tab\there", "new\nline", "%2F", "a..b", "-", "@"] {
            let encoded = FileNameCodec.encode(name)
            #expect(FileNameCodec.decode(encoded) == name)
            #expect(!encoded.contains("/"))
            #expect(FileNameCodec.itemName(forFileName: encoded + ".json") == .entity(key: name))
        }
    }
}
