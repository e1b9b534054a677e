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

    @Test func findsJSONFilesThatStayLocalForTheirNameAndProposesPlainNames() {
        for (local, stem, plain) in [
            ("My Note.json", "My Note", "My-Note.json"), ("100%.json", "100%", "100-.json"),
            ("%41.json", "%41", "-41.json"), ("Café  menu.json", "Café  menu", "Caf-menu.json"),
        ] {
            #expect(FileNameCodec.localJSONStem(local) == stem, "\(local)")
            #expect(FileNameCodec.plainFileName(for: stem) == plain)
            // The proposed name is an entity's, spelled as it is (no encoding needed).
            #expect(FileNameCodec.itemName(forFileName: plain) == .entity(key: String(plain.dropLast(5))))
        }
        for other in ["note.json", "a%2Fb.json", ".note.json", "note.json~", ".json", "x.txt", "4913"] {
            #expect(FileNameCodec.localJSONStem(other) == nil, "\(other)")
        }
        #expect(FileNameCodec.plainFileName(for: ".hidden") == "-hidden.json")
        #expect(FileNameCodec.plainFileName(for: String(repeating: "a", count: 300)) == String(repeating: "a", count: 256) + ".json")
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
