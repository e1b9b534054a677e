import JSONDiff
import Testing

struct JSONParserTests {
    func parseError(_ text: String) -> JSONParseError? {
        do {
            _ = try JSONValue(parsing: text)
            return nil
        } catch {
            return error
        }
    }

    @Test func parsesEveryKindOfValue() throws {
        let value = try JSONValue(parsing: #" {"a": [1, -2, 3.5, 1e3, true, false, null, "x"], "b": {}, "c": []} "#)
        #expect(value == ["a": [1, -2, 3.5, .double(1000), true, false, nil, "x"], "b": .object([:]), "c": []])
    }

    @Test func integersStayIntegersAndFloatsStayFloats() throws {
        #expect(try JSONValue(parsing: "1") == .integer(1))
        #expect(try JSONValue(parsing: "1.0") == .double(1.0))
        #expect(try JSONValue(parsing: "1.0").compactRendered() == "1.0")
        #expect(try JSONValue(parsing: "-0") == .integer(0))
        #expect(try JSONValue(parsing: "-0.0").compactRendered() == "-0.0")
        #expect(try JSONValue(parsing: "1E2") == .double(100))
        #expect(try JSONValue(parsing: "0.1").compactRendered() == "0.1")
        #expect(try JSONValue(parsing: "5e-324") == .double(.leastNonzeroMagnitude))
    }

    @Test func floatsParseCorrectlyRounded() throws {
        // Fast path (few digits, small exponent) and the general path must agree with Double(String).
        let texts = ["0.1", "123.456e-5", "1e22", "1e23", "9007199254740993.0", "0.30000000000000004", "-0.0",
                     "2.2250738585072014e-308", "4.9e-324", "1.7976931348623157e308", "123456789012345.6",
                     "0.000000000000000000001", "1E-22", "7.0e+0", "1234567890123456789e-3"]
        for text in texts {
            let expected = try #require(Double(text))
            #expect(try JSONValue(parsing: text) == .double(expected), "\(text)")
            #expect(try JSONValue(parsing: text).compactRendered() == expected.description)
        }
    }

    @Test func integerBoundsAndBigIntegers() throws {
        #expect(try JSONValue(parsing: "9223372036854775807") == .integer(.max))
        #expect(try JSONValue(parsing: "-9223372036854775808") == .integer(.min))
        #expect(try JSONValue(parsing: "9223372036854775808") == .bigInteger("9223372036854775808"))
        #expect(try JSONValue(parsing: "-9223372036854775809") == .bigInteger("-9223372036854775809"))
        let huge = "123456789012345678901234567890123456789"
        #expect(try JSONValue(parsing: huge).compactRendered() == huge)
        // 2^53 + 1 is not representable as a Double; it must survive exactly.
        #expect(try JSONValue(parsing: "9007199254740993") == .integer(9_007_199_254_740_993))
        #expect(try JSONValue(parsing: "[9007199254740993]").compactRendered() == "[9007199254740993]")
        #expect(try JSONValue(parsing: "18446744073709551617").compactRendered() == "18446744073709551617")
    }

    @Test func stringsEscapesAndUnicode() throws {
        #expect(try JSONValue(parsing: #""a\"b\\c\/d\b\f\n\r\t""#) == .string("a\"b\\c/d\u{8}\u{c}\n\r\t"))
        #expect(try JSONValue(parsing: #""\u00e9\u4e2d""#) == .string("é中"))
        #expect(try JSONValue(parsing: #""\uD83D\uDE00""#) == .string("😀"))
        #expect(try JSONValue(parsing: "\"😀 é 中\"") == .string("😀 é 中"))
        #expect(try JSONValue(parsing: #""👨‍👩‍👧""#).stringValue?.count == 1)
    }

    @Test func loneSurrogateEscapesAreRefused() throws {
        // Issue 13: "a\ud800b" was stored as "a\ufffdb", the data changed without a word.
        for text in [#""a\ud800b""#, #""\uD83D""#, #""\uDE00x""#, #""\uD83Dx""#, #""\uD83D\u0041""#, #"{"k\udfff": 1}"#] {
            let error = try #require(parseError(text), "\(text)")
            #expect(error.kind == .loneSurrogate, "\(text)")
            #expect(error.description.contains("lone UTF-16 surrogate"), "\(error)")
        }
        let error = try #require(parseError(#"["x", "a\ud800b"]"#))
        #expect(error.column == 9)  // points at the escape
        #expect(error.description == #"line 1, column 9: expected a whole character, not the lone UTF-16 surrogate \uD800"#)
        #expect(try JSONValue(parsing: Array(#""\ud83d\ude00""#.utf8)) == "😀")
    }

    @Test func duplicateKeysLastWins() throws {
        #expect(try JSONValue(parsing: #"{"a": 1, "a": 2}"#) == ["a": 2])
        // At every depth, each object keeping only its own members (they are gathered on one
        // stack while the objects inside them are parsed).
        #expect(try JSONValue(parsing: #"{"a": {"a": 1, "b": {"a": 3, "a": 4}, "a": 2}, "c": [{"d": 5, "d": 6}, {}], "a": 7, "e": {}}"#)
            == ["a": 7, "c": [["d": 6], [:]], "e": [:]])
        #expect(try JSONValue(parsing: #"[{"a": {"b": 1, "c": 2}, "d": 3}, {"a": 4}]"#) == [["a": ["b": 1, "c": 2], "d": 3], ["a": 4]])
        // A parse that fails in an inner object leaves nothing behind for the next one.
        #expect(throws: JSONParseError.self) { try JSONValue(parsing: #"{"a": {"b": 1, "c": }}"#) }
        #expect(try JSONValue(parsing: #"{"x": 1}"#) == ["x": 1])
    }

    @Test func parsesBytes() throws {
        #expect(try JSONValue(parsing: Array("[1,\"é\"]".utf8)) == [1, "é"])
        #expect(try JSONValue(parsing: "[1]".utf8) == [1])
    }

    @Test(arguments: [
        ("[1,]", 1, 4, "a value"),
        ("{\"a\":1,}", 1, 8, "a string key"),
        ("{\"a\":1 \"b\":2}", 1, 8, "',' or '}'"),
        ("[1 2]", 1, 4, "',' or ']'"),
        ("{\n  \"a\": 1\n  \"b\": 2\n}", 3, 3, "',' or '}'"),
        ("{\"a\" 1}", 1, 6, "':'"),
        ("{1: 2}", 1, 2, "a string key or '}'"),
        ("// c\n1", 1, 1, "a value"),
        ("01", 1, 2, "'.', 'e' or the end of the number (no leading zeros)"),
        ("-", 1, 2, "a digit"),
        ("1.", 1, 3, "a digit after '.'"),
        ("1e+", 1, 4, "a digit in the exponent"),
        ("\"\\x\"", 1, 3, "an escape character ('\"', '\\', '/', 'b', 'f', 'n', 'r', 't' or 'u')"),
        ("\"\\u12G4\"", 1, 6, "a hex digit"),
        ("\"a\tb\"", 1, 3, "'\"' or an escape sequence (control characters must be escaped)"),
        ("\"abc", 1, 5, "'\"' closing the string"),
        // After an escape: a control character in a long run, and no closing quote.
        ("\"a\\nbcdefghijklmnopq\tb\"", 1, 21, "'\"' or an escape sequence (control characters must be escaped)"),
        ("\"a\\nbcdefghijklmnopqrstuvwxyz", 1, 30, "'\"' closing the string"),
        ("\"a\\n", 1, 5, "'\"' closing the string"),
        ("[1] x", 1, 5, "end of input"),
        ("tru", 1, 1, "'true'"),
        ("nul", 1, 1, "'null'"),
        ("", 1, 1, "a value"),
        ("   ", 1, 4, "a value"),
        ("[\"😀é\", x]", 1, 8, "a value"),
        ("'a'", 1, 1, "a value"),
        ("NaN", 1, 1, "a value"),
    ])
    func reportsLineColumnAndExpectation(text: String, line: Int, column: Int, expected: String) throws {
        let error = try #require(parseError(text), "\(text) should not parse")
        #expect(error.kind == .syntax)
        #expect(error.line == line)
        #expect(error.column == column)
        #expect(error.expected == expected)
        #expect(error.description == "line \(line), column \(column): expected \(expected)")
    }

    /// Text with escapes every few bytes and long runs between them (a note's text): every run
    /// and every escape comes through, also where a run ends inside an 8-byte word.
    @Test func stringsWithEscapesBetweenLongRunsParseWhole() throws {
        for width in [1, 7, 8, 9, 15, 16, 40] {
            let run = String(repeating: "ab é", count: width).prefix(width)
            let text = (0..<30).map { "\(run)\($0)" }.joined(separator: "\n") + "\"\\\t/" + run
            let value = JSONValue.string(text)
            #expect(try JSONValue(parsing: value.compactRendered()) == value, "width \(width)")
            #expect(try JSONValue(parsing: Array(value.prettyRendered().utf8)) == value, "width \(width)")
        }
    }

    @Test func nestingDepthIsLimited() throws {
        let deep = String(repeating: "[", count: 600) + String(repeating: "]", count: 600)
        let error = try #require(parseError(deep))
        #expect(error.kind == .nestingTooDeep)
        #expect(error.column == JSONValue.maxNestingDepth + 1)
        let ok = String(repeating: "[", count: 512) + String(repeating: "]", count: 512)
        #expect(parseError(ok) == nil)
    }

    @Test func hugeFloatsAreRejectedNotInfinite() throws {
        let error = try #require(parseError("[1e400]"))
        #expect(error.kind == .numberOutOfRange)
        #expect(error.column == 2)
    }

    @Test func invalidUTF8BytesInStringsAreRejected() throws {
        let bytes: [UInt8] = [UInt8(ascii: "\""), 0xC3, 0x28, UInt8(ascii: "\"")]
        #expect(throws: JSONParseError.self) { try JSONValue(parsing: bytes) }
        do {
            _ = try JSONValue(parsing: bytes)
        } catch {
            #expect(error.kind == .invalidUTF8)
        }
        // Outside strings any non-ASCII byte is a plain syntax error.
        #expect(throws: JSONParseError.self) { try JSONValue(parsing: [0xFF] as [UInt8]) }
    }

    /// A document of a MiB or more has its outermost object's members counted and parsed
    /// straight into the object (issue 37): the same value as a small document's way, with the
    /// last of duplicate keys winning, whatever its strings and nested values hold.
    @Test func aLargeDocumentsOutermostObjectParsesAsASmallOnesDoes() throws {
        let filler = String(repeating: "x", count: 1 << 20)
        let text = """
            { "a" : 1, "q\\\"},{" : "},{\\\"[", "nested": {"a": [1, {"b": "}"}], "c": {}}, "a": 2,
              "empty": [], "filler": "\(filler)", "list": [ [], [[]], {"x,": ","} ] , "last" : null }
            """
        let value = try JSONValue(parsing: text)
        let expected: JSONObject = [
            "a": 2, "q\"},{": "},{\"[", "nested": ["a": [1, ["b": "}"]], "c": [:]], "empty": [], "filler": .string(filler),
            "list": [[], [[]], ["x,": ","]], "last": nil,
        ]
        let object = try #require(value.objectValue)
        #expect(Set(object.keys) == Set(expected.keys))
        for (key, member) in expected where key != "filler" { #expect(object[key] == member, "\(key.string)") }
        #expect(object["filler"]?.stringValue?.count == filler.count)
        // The same members in a document under the threshold parse to the same object.
        let small = try JSONValue(parsing: text.replacingOccurrences(of: filler, with: "x"))
        #expect(small.objectValue?.count == expected.count)
        // Malformed text is still refused.
        #expect(parseError(String(text.dropLast())) != nil)
        #expect(parseError(text.replacingOccurrences(of: "\"last\" : null", with: "\"last\" null")) != nil)
    }
}
