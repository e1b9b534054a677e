import JSONDiff
import Testing

/// The word-at-a-time string scans of the parser and renderer, with quotes, backslashes, control
/// characters and non-ASCII bytes at every position of an 8-byte word.
struct ByteScanningTests {
    @Test func stringsRoundTripWithSpecialsAtEveryWordOffset() throws {
        for position in 0..<20 {
            for special in ["\"", "\\", "\n", "\u{1}", "\u{1F}", " ", "~", "é", "🙂", "\u{7F}"] {
                let text = String(repeating: "a", count: position) + special + String(repeating: "b", count: 9)
                let quoted = text.jsonQuoted
                #expect(try JSONValue(parsing: quoted) == .string(text))
                #expect(try JSONValue(parsing: Array(quoted.utf8)) == .string(text))
                let object = JSONValue.object([JSONKey(text): .string(text)])
                #expect(try JSONValue(parsing: object.prettyRendered()) == object)
                #expect(try JSONValue(parsing: Array(object.compactRenderedBytes())) == object)
            }
        }
    }

    @Test func rawControlCharactersAndBadUTF8AreStillRejectedAtEveryOffset() {
        for position in 0..<20 {
            let prefix = Array(repeating: UInt8(ascii: "a"), count: position)
            let control = [UInt8(ascii: "\"")] + prefix + [0x0A] + [UInt8(ascii: "\"")]
            #expect(throws: JSONParseError.self) { try JSONValue(parsing: control) }
            let invalid = [UInt8(ascii: "\"")] + prefix + [0xFF] + Array(repeating: UInt8(ascii: "b"), count: 9) + [UInt8(ascii: "\"")]
            do {
                _ = try JSONValue(parsing: invalid)
                Issue.record("invalid UTF-8 accepted at \(position)")
            } catch {
                #expect(error.kind == .invalidUTF8)
            }
        }
    }

    @Test func escapesRenderTheSameAtEveryOffset() {
        for position in 0..<20 {
            let text = String(repeating: "a", count: position) + "\"\\\n\u{1}" + String(repeating: "b", count: 9)
            let expected = "\"" + String(repeating: "a", count: position) + "\\\"\\\\\\n\\u0001" + String(repeating: "b", count: 9) + "\""
            #expect(text.jsonQuoted == expected)
        }
    }
}
