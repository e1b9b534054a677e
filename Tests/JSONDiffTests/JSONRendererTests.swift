import JSONDiff
import Testing

struct JSONRendererTests {
    let sample: JSONValue = ["b": [1, 2.5, ["x": nil]], "a": "é\"\\/\n\u{1}", "c": .object([:]), "d": [], "e": true]

    @Test func compactIsSortedWithoutWhitespace() {
        #expect(sample.compactRendered() == #"{"a":"é\"\\/\n\u0001","b":[1,2.5,{"x":null}],"c":{},"d":[],"e":true}"#)
    }

    @Test func prettyIsTheFileFormat() {
        let expected = """
        {
          "a": "é\\"\\\\/\\n\\u0001",
          "b": [
            1,
            2.5,
            {
              "x": null
            }
          ],
          "c": {},
          "d": [],
          "e": true
        }

        """
        #expect(sample.prettyRendered() == expected)
        #expect(JSONValue.integer(3).prettyRendered() == "3\n")
    }

    /// The wire format taken from the file format's rendering keeps every byte inside strings:
    /// spaces, escaped quotes and backslashes (also at the end of a string, or of an 8-byte word).
    @Test(arguments: [
        "a b", "  ", "\"", "\\", "x\\", "\\\"", " \" \\ \" ", "1234567\"", "12345678\\", "\n\t \r",
        String(repeating: "ab \"cd\\ ", count: 20), "é 😀 \u{1}",
    ])
    func compactFromThePrettyRenderingIsTheCompactRendering(text: String) {
        let key = JSONKey(text)
        let value: JSONValue = .object([key: [.string(text), .object(["k k": .string(text), key: 1.5])], "z": .string(text), " ": [" ", []]])
        let both = value.compactAndPrettyRendered()
        #expect(both.compact == value.compactRendered())
        #expect(both.pretty == Array(value.prettyRendered().utf8))
    }

    @Test func keysSortByCodePoint() {
        let value: JSONValue = ["é": 1, "z": 2, "Z": 3, "😀": 4, "ab": 5, "a": 6, "\u{FFFF}": 7]
        #expect(value.compactRendered() == "{\"Z\":3,\"a\":6,\"ab\":5,\"z\":2,\"é\":1,\"\u{FFFF}\":7,\"😀\":4}")
    }

    /// A large object's keys are sorted by their first eight bytes first (issue 37): keys that
    /// share those, are shorter or longer than eight, hold NUL bytes or several-byte characters
    /// still come in code point order, as a small object's do.
    @Test func aLargeObjectsKeysSortByCodePointToo() {
        var keys: Set<String> = ["", "\u{0}", "a", "a\u{0}", "a\u{0}b", "abcdefgh", "abcdefg", "abcdefgh\u{0}", "abcdefghi",
                                 "abcdefghé", "abcdefgh😀", "é", "e\u{301}", "😀", "Z", "zz"]
        var generator = SystemRandomNumberGenerator()
        let alphabet: [Character] = ["a", "b", "\u{0}", "é", "😀", "z", "A"]
        while keys.count < 400 {
            let length = Int.random(in: 0...12, using: &generator)
            keys.insert(String((0..<length).map { _ in alphabet.randomElement(using: &generator)! }))
        }
        let object = JSONValue.object(JSONObject(uniqueKeysWithValues: keys.map { (JSONKey($0), JSONValue.integer(1)) }))
        let ordered = keys.map { JSONKey($0) }.sorted()
        let expected = "{" + ordered.map { JSONValue.string($0.string).compactRendered() + ":1" }.joined(separator: ",") + "}"
        #expect(object.compactRendered() == expected)
    }

    @Test func controlCharactersAreEscaped() throws {
        let text = String(decoding: (0..<0x20).map { UInt8($0) }, as: UTF8.self)
        let rendered = JSONValue.string(text).compactRendered()
        #expect(rendered.hasPrefix(#""\u0000\u0001"#))
        #expect(rendered.contains(#"\b\t\n\u000b\f\r\u000e"#))
        #expect(rendered.hasSuffix(#"\u001f""#))
        #expect(try JSONValue(parsing: rendered) == .string(text))
        #expect(JSONValue.string("\u{7F}😀").compactRendered() == "\"\u{7F}😀\"")
    }

    @Test func doublesRenderShortestRoundTrip() throws {
        let cases: [(Double, String)] = [(1.0, "1.0"), (0.1, "0.1"), (1e100, "1e+100"), (-2.5e-7, "-2.5e-07"),
                                         (123456.789, "123456.789"), (.leastNonzeroMagnitude, "5e-324"), (1.7976931348623157e308, "1.7976931348623157e+308")]
        for (number, text) in cases {
            #expect(JSONValue.double(number).compactRendered() == text)
            #expect(try JSONValue(parsing: text) == .double(number))
        }
        #expect(JSONValue.double(.infinity).compactRendered() == "null")
    }

    @Test func bigAndExactIntegersRenderVerbatim() {
        #expect(JSONValue.integer(.min).compactRendered() == "-9223372036854775808")
        #expect(JSONValue.bigInteger("99999999999999999999").compactRendered() == "99999999999999999999")
    }

    @Test func roundTripsThroughBothFormats() throws {
        let text = #"{"big":123456789012345678901234567890,"f":1.0,"i":-7,"s":"😀\u0000","n":[null,[],{}]}"#
        let value = try JSONValue(parsing: text)
        #expect(try JSONValue(parsing: value.prettyRendered()) == value)
        #expect(try JSONValue(parsing: value.compactRendered()) == value)
        #expect("a\"b".jsonQuoted == #""a\"b""#)
    }

    @Test func accessors() {
        #expect(sample["e"]?.boolValue == true)
        #expect(sample["b"]?.arrayValue?.count == 3)
        #expect(sample.objectValue?.count == 5)
        #expect(JSONValue.integer(4).integerValue == 4)
        #expect(JSONValue.integer(4).doubleValue == 4)
        #expect(JSONValue.string("x").stringValue == "x")
        #expect(JSONValue.null.isNull)
        #expect(JSONValue.string("x").objectValue == nil)
    }

    /// Members in the caller's order, each rendered as `compactRendered` and `jsonQuoted` render
    /// them alone (keys escaped too).
    @Test func memberWriterKeepsTheCallersOrderAndEscapesLikeTheRenderer() {
        var members = JSONMemberWriter()
        members.key("z\"")
        members.string("é\"\\/\n\u{1}")
        members.key("a")
        members.value(sample)
        members.key("n")
        members.integer(-42)
        members.key("ids")
        members.strings(["x\"", ""])
        members.key("none")
        members.strings([])
        members.key("raw")
        members.raw("[1,2]")
        let expected = "{" + #""z\"":"# + "é\"\\/\n\u{1}".jsonQuoted + #","a":"# + sample.compactRendered()
            + #","n":-42,"ids":["x\"",""],"none":[],"raw":[1,2]}"#
        #expect(members.rendered() == expected)
        #expect(JSONMemberWriter().rendered() == "{}")
    }
}
