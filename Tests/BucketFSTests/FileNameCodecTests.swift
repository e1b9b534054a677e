import BucketFS
import Foundation
import Testing

/// The server's key shape (DESIGN.md, protocol facts), restated: BucketFS does not import SyncProtocol.
enum EntityKeyShape {
    static func isServerKey(_ key: String) -> Bool {
        (1...256).contains(key.utf8.count) && key.utf8.allSatisfy { byte in
            (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A)
                || "._%@-".utf8.contains(byte)
        }
    }
}

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
            ("100%.json", "100%", "100-.json"), ("%41.json", "%41", "-41.json"),
            ("caf%25C3%25A9.json", "caf%25C3%25A9", "caf-25C3-25A9.json"), ("50% off.json", "50% off", "50- off.json"),
        ] {
            #expect(FileNameCodec.localJSONStem(local) == stem, "\(local)")
            #expect(FileNameCodec.plainFileName(for: stem) == plain)
            // The proposed name is an entity's, shown as it is, and its key is one the server takes.
            let item = FileNameCodec.itemName(forFileName: plain)
            #expect(item == .entity(key: FileNameCodec.keyEscape(String(plain.dropLast(5)))))
            #expect(FileNameCodec.fileName(for: item) == plain)
        }
        for other in ["note.json", "My Note.json", "café.json", "a%2Fb.json", ".note.json", "note.json~", ".json", "x.txt", "4913"] {
            #expect(FileNameCodec.localJSONStem(other) == nil, "\(other)")
        }
        #expect(FileNameCodec.plainFileName(for: ".hidden") == "-hidden.json")
        #expect(FileNameCodec.plainFileName(for: String(repeating: "a", count: 300)) == String(repeating: "a", count: 256) + ".json")
        #expect(FileNameCodec.plainFileName(for: String(repeating: "é", count: 100)) == String(repeating: "é", count: 42) + ".json")
    }

    /// Issue 13: keys read naturally; names a person types sync; every other key keeps a name.
    @Test(arguments: [
        ("caf%C3%A9", "café.json"), ("My%20Note", "My Note.json"), ("tag", "tag.json"), ("%F0%9F%99%82", "🙂.json"),
        ("a%2Fb", "a%252Fb.json"), ("100%25", "100%2525.json"), ("caf%c3%a9", "caf%25c3%25a9.json"), ("%41", "%2541.json"),
        ("100%", "100%25.json"), (".x", "%2Ex.json"), ("%2Ex", "%252Ex.json"), ("a/b", "a%2Fb.json"), ("My Note", "My%20Note.json"),
    ])
    func entityKeysReadNaturally(key: String, fileName: String) {
        #expect(FileNameCodec.fileName(forKey: key) == fileName)
        #expect(FileNameCodec.itemName(forFileName: fileName) == .entity(key: key))
    }

    @Test func keysAndNamesMapOneToOne() {
        var random = SystemRandomNumberGenerator()
        let keyAlphabet = Array("aZ09._@-%%%CFc3A9E2F".utf8)
        let nameAlphabet = ["a", "Z", "0", ".", "%", "2", "F", "C", "3", "é", " ", "🙂", "-", "/"]
        for _ in 0..<20_000 {
            // Keys the server takes, many of them with escapes (canonical or not).
            let key = String(decoding: (0..<Int.random(in: 1...8, using: &random)).map { _ in keyAlphabet.randomElement(using: &random)! }, as: UTF8.self)
            let name = FileNameCodec.fileName(forKey: key)
            #expect(FileNameCodec.itemName(forFileName: name) == .entity(key: key), "\(key) -> \(name)")
            #expect(!name.contains("/"))
            // Names a person might type: each is an entity whose key shows as that name, or local.
            let typed = (0..<Int.random(in: 1...6, using: &random)).map { _ in nameAlphabet.randomElement(using: &random)! }
                .joined().replacingOccurrences(of: "/", with: "") + ".json"
            if case .entity(let typedKey) = FileNameCodec.itemName(forFileName: typed) {
                #expect(FileNameCodec.fileName(forKey: typedKey) == typed, "\(typed) -> \(typedKey)")
                if !typed.contains("%") { #expect(EntityKeyShape.isServerKey(typedKey) || typedKey.utf8.count > 256, "\(typedKey)") }
            }
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
