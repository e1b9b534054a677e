extension JSONValue {
    /// Containers nested deeper than this are rejected (bounds recursion on untrusted input).
    public static let maxNestingDepth = 512

    /// Parses a complete JSON text (RFC 8259, strict).
    ///
    /// A lone UTF-16 surrogate escape (`\uD800` not followed by a low surrogate escape, or a
    /// `\uDC00` not preceded by a high one) is refused (`loneSurrogate`): no String can hold it,
    /// and replacing it with U+FFFD would change the data silently.
    /// Duplicate object keys: the last one wins.
    public init(parsing text: String) throws(JSONParseError) {
        var text = text
        let result = text.withUTF8 { bytes in JSONParser.parse(bytes, knownValidUTF8: true) }
        self = try result.get()
    }

    /// Parses a text that `init(parsing:)` refused for a lone surrogate, reading each as U+FFFD:
    /// for the error reply to a change that carried one, never for data that is kept.
    package init(parsingReplacingLoneSurrogates text: String) throws(JSONParseError) {
        var text = text
        let result = text.withUTF8 { bytes in JSONParser.parse(bytes, knownValidUTF8: true, replacingLoneSurrogates: true) }
        self = try result.get()
    }

    /// Parses a complete JSON text given as UTF-8 bytes; invalid UTF-8 inside strings is an error.
    public init(parsing bytes: some Collection<UInt8>) throws(JSONParseError) {
        let fast = bytes.withContiguousStorageIfAvailable { buffer in JSONParser.parse(buffer) }
        if let fast {
            self = try fast.get()
        } else {
            let copy = Array(bytes)
            self = try copy.withUnsafeBufferPointer { buffer in JSONParser.parse(buffer) }.get()
        }
    }
}

/// A byte-level recursive-descent parser over UTF-8.
struct JSONParser {
    private let bytes: UnsafeBufferPointer<UInt8>
    /// Input that came from a Swift String is valid UTF-8 already; raw bytes must be validated.
    private let knownValidUTF8: Bool
    /// Read a lone surrogate as U+FFFD instead of refusing it: only to find out who sent a text
    /// that is refused anyway (a change's id and ccid, for its error reply).
    private let replacingLoneSurrogates: Bool
    private var position = 0
    private var depth = 0
    private var scratch: [UInt8] = []
    /// The members of the objects being parsed, innermost last: each object is built once its
    /// members are known, at its full size, rather than grown (and every key hashed again) as
    /// they come.
    private var members: [(JSONKey, JSONValue)] = []
    /// Where the outermost object's members go instead of into an object (`forEachOutermostMember`).
    private var outermost: OutermostMembers?

    /// `forEachOutermostMember`'s receivers: told how many members to expect (an estimate), then
    /// given each member in document order.
    struct OutermostMembers {
        let expect: (Int) -> Void
        let member: (String, JSONValue) -> Void
    }

    private init(bytes: UnsafeBufferPointer<UInt8>, knownValidUTF8: Bool, replacingLoneSurrogates: Bool) {
        self.bytes = bytes
        self.knownValidUTF8 = knownValidUTF8
        self.replacingLoneSurrogates = replacingLoneSurrogates
    }

    /// Parses a text that must be one JSON object, handing each of its members to `receivers`
    /// as it is parsed (keys in document order, duplicates too) rather than building the object.
    /// False if the text is not one JSON object, or not JSON (the members handed over until
    /// then are to be ignored).
    static func forEachOutermostMember(_ bytes: UnsafeBufferPointer<UInt8>, _ receivers: OutermostMembers) -> Bool {
        var parser = JSONParser(bytes: bytes, knownValidUTF8: false, replacingLoneSurrogates: false)
        parser.outermost = receivers
        parser.skipWhitespace()
        guard parser.peek() == UInt8(ascii: "{") else { return false }
        do throws(JSONParseError) {
            _ = try parser.parseObject()
            parser.skipWhitespace()
            return parser.position == bytes.count
        } catch {
            return false
        }
    }

    static func parse(
        _ bytes: UnsafeBufferPointer<UInt8>, knownValidUTF8: Bool = false, replacingLoneSurrogates: Bool = false
    ) -> Result<JSONValue, JSONParseError> {
        var parser = JSONParser(bytes: bytes, knownValidUTF8: knownValidUTF8, replacingLoneSurrogates: replacingLoneSurrogates)
        do throws(JSONParseError) {
            let value = try parser.parseValue()
            parser.skipWhitespace()
            if parser.position != bytes.count {
                throw parser.error(expected: "end of input")
            }
            return .success(value)
        } catch {
            return .failure(error)
        }
    }

    // MARK: - Values

    private mutating func parseValue() throws(JSONParseError) -> JSONValue {
        skipWhitespace()
        guard position < bytes.count else { throw error(expected: "a value") }
        switch bytes[position] {
        case UInt8(ascii: "{"): return try parseObject()
        case UInt8(ascii: "["): return try parseArray()
        case UInt8(ascii: "\""): return .string(try parseString())
        case UInt8(ascii: "t"): try parseLiteral("true"); return .bool(true)
        case UInt8(ascii: "f"): try parseLiteral("false"); return .bool(false)
        case UInt8(ascii: "n"): try parseLiteral("null"); return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try parseNumber()
        default: throw error(expected: "a value")
        }
    }

    private mutating func parseLiteral(_ word: StaticString) throws(JSONParseError) {
        let start = position
        let count = word.utf8CodeUnitCount
        let matches = word.withUTF8Buffer { expected in
            guard bytes.count - start >= count else { return false }
            for index in 0..<count where bytes[start + index] != expected[index] { return false }
            return true
        }
        guard matches else { throw error(expected: "'\(word)'") }
        position += count
    }

    private mutating func enterContainer() throws(JSONParseError) {
        depth += 1
        if depth > JSONValue.maxNestingDepth {
            throw error(kind: .nestingTooDeep,
                        expected: "at most \(JSONValue.maxNestingDepth) levels of nesting")
        }
    }

    private mutating func parseObject() throws(JSONParseError) -> JSONValue {
        try enterContainer()
        position += 1  // '{'
        skipWhitespace()
        if peek() == UInt8(ascii: "}") {
            position += 1
            depth -= 1
            return .object(JSONObject())
        }
        let first = members.count
        let sink = depth == 1 ? outermost : nil
        sink?.expect(countMembers())
        // A large document's outermost object goes straight into a dictionary of its size
        // (its members counted first): gathered first, the members of a note of 750,000 small
        // keys took as much memory again as the object built from them (issue 37).
        var direct = sink == nil && depth == 1 && bytes.count >= Self.countedObjectBytes ? JSONObject(minimumCapacity: countMembers()) : nil
        var expectedKey = "a string key or '}'"
        while true {
            skipWhitespace()
            guard peek() == UInt8(ascii: "\"") else { throw error(expected: expectedKey) }
            let key = try parseString()
            skipWhitespace()
            guard peek() == UInt8(ascii: ":") else { throw error(expected: "':'") }
            position += 1
            let value = try parseValue()
            if let sink {
                sink.member(key, value)
            } else if direct != nil {
                direct?[JSONKey(key)] = value
            } else {
                members.append((JSONKey(key), value))
            }
            skipWhitespace()
            switch peek() {
            case UInt8(ascii: ","):
                position += 1
                expectedKey = "a string key"
            case UInt8(ascii: "}"):
                position += 1
                depth -= 1
                if sink != nil { return .object([:]) }
                if let direct { return .object(direct) }
                let object = JSONObject(members[first...], uniquingKeysWith: { _, last in last })
                members.removeSubrange(first...)
                return .object(object)
            default:
                throw error(expected: "',' or '}'")
            }
        }
    }

    /// Inputs from this many bytes have their outermost object's members counted before it is
    /// parsed (`countMembers`).
    static let countedObjectBytes = 1 << 20

    /// How many members the object whose `{` was just passed has (an estimate, for its
    /// dictionary's capacity: a scan of its bytes, strings skipped a word at a time and nested
    /// containers by their depth; malformed text is the parse's to refuse).
    private func countMembers() -> Int {
        var index = position
        var depth = 0
        var separators = 0
        while index < bytes.count {
            switch bytes[index] {
            case UInt8(ascii: "\""):
                guard let end = ByteScanning.endOfString(bytes, openingAt: index) else { return separators + 1 }
                index = end
                continue
            case UInt8(ascii: "{"), UInt8(ascii: "["): depth += 1
            case UInt8(ascii: "}"), UInt8(ascii: "]"):
                if depth == 0 { return separators + 1 }
                depth -= 1
            case UInt8(ascii: ","): if depth == 0 { separators += 1 }
            default: break
            }
            index += 1
        }
        return separators + 1
    }

    private mutating func parseArray() throws(JSONParseError) -> JSONValue {
        try enterContainer()
        position += 1  // '['
        var array: [JSONValue] = []
        skipWhitespace()
        if peek() == UInt8(ascii: "]") {
            position += 1
            depth -= 1
            return .array(array)
        }
        while true {
            array.append(try parseValue())
            skipWhitespace()
            switch peek() {
            case UInt8(ascii: ","):
                position += 1
            case UInt8(ascii: "]"):
                position += 1
                depth -= 1
                return .array(array)
            default:
                throw error(expected: "',' or ']'")
            }
        }
    }

    // MARK: - Numbers

    private mutating func parseNumber() throws(JSONParseError) -> JSONValue {
        let start = position
        let negative = bytes[position] == UInt8(ascii: "-")
        if negative { position += 1 }
        guard let first = peek(), isDigit(first) else { throw error(expected: "a digit") }
        // Accumulate negatively so that Int64.min fits; overflow means a big integer.
        var magnitude: Int64 = 0
        var overflowed = false
        if first == UInt8(ascii: "0") {
            position += 1
            if let next = peek(), isDigit(next) {
                throw error(expected: "'.', 'e' or the end of the number (no leading zeros)")
            }
        } else {
            while let digit = peek(), isDigit(digit) {
                if !overflowed {
                    let (times10, o1) = magnitude.multipliedReportingOverflow(by: 10)
                    let (sum, o2) = times10.subtractingReportingOverflow(Int64(digit &- UInt8(ascii: "0")))
                    if o1 || o2 { overflowed = true } else { magnitude = sum }
                }
                position += 1
            }
        }
        var isFloat = false
        if peek() == UInt8(ascii: ".") {
            isFloat = true
            position += 1
            guard let digit = peek(), isDigit(digit) else { throw error(expected: "a digit after '.'") }
            while let digit = peek(), isDigit(digit) { position += 1 }
        }
        if let marker = peek(), marker == UInt8(ascii: "e") || marker == UInt8(ascii: "E") {
            isFloat = true
            position += 1
            if let sign = peek(), sign == UInt8(ascii: "+") || sign == UInt8(ascii: "-") { position += 1 }
            guard let digit = peek(), isDigit(digit) else { throw error(expected: "a digit in the exponent") }
            while let digit = peek(), isDigit(digit) { position += 1 }
        }
        if isFloat {
            if let value = fastDouble(start..<position) { return .double(value) }
            let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<position]), as: UTF8.self)
            guard let value = Double(text), value.isFinite else {
                throw error(kind: .numberOutOfRange, at: start, expected: "a number within the range of a double")
            }
            return .double(value)
        }
        if overflowed { return .bigInteger(text(start..<position)) }
        if negative { return .integer(magnitude) }
        let (positive, overflow) = Int64(0).subtractingReportingOverflow(magnitude)
        return overflow ? .bigInteger(text(start..<position)) : .integer(positive)
    }

    private func text(_ range: Range<Int>) -> String {
        String(decoding: UnsafeBufferPointer(rebasing: bytes[range]), as: UTF8.self)
    }

    private static let exactPowersOfTen: [Double] = (0...22).map { exponent in
        var value = 1.0
        for _ in 0..<exponent { value *= 10 }
        return value
    }

    /// Clinger's fast path: a decimal with at most 15 significant digits and a power of ten up to
    /// 10^22 is one exactly rounded IEEE multiply or divide of two exact values. Nil otherwise.
    private func fastDouble(_ range: Range<Int>) -> Double? {
        var index = range.lowerBound
        let negative = bytes[index] == UInt8(ascii: "-")
        if negative { index += 1 }
        var mantissa: UInt64 = 0
        var digits = 0
        var exponent = 0
        var inFraction = false
        while index < range.upperBound {
            let byte = bytes[index]
            if byte == UInt8(ascii: ".") {
                inFraction = true
            } else if byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") {
                if mantissa != 0 || byte != UInt8(ascii: "0") { digits += 1 }
                guard digits <= 15 else { return nil }
                mantissa = mantissa * 10 + UInt64(byte - UInt8(ascii: "0"))
                if inFraction { exponent -= 1 }
            } else {
                break  // 'e' or 'E'
            }
            index += 1
        }
        if index < range.upperBound {
            index += 1
            var exponentNegative = false
            if bytes[index] == UInt8(ascii: "-") || bytes[index] == UInt8(ascii: "+") {
                exponentNegative = bytes[index] == UInt8(ascii: "-")
                index += 1
            }
            var explicit = 0
            while index < range.upperBound {
                explicit = explicit * 10 + Int(bytes[index] - UInt8(ascii: "0"))
                guard explicit < 1000 else { return nil }
                index += 1
            }
            exponent += exponentNegative ? -explicit : explicit
        }
        guard exponent >= -22, exponent <= 22 else { return nil }
        var value = Double(mantissa)
        value = exponent < 0 ? value / Self.exactPowersOfTen[-exponent] : value * Self.exactPowersOfTen[exponent]
        return negative ? -value : value
    }

    // MARK: - Strings

    private mutating func parseString() throws(JSONParseError) -> String {
        let quote = position
        position += 1  // '"'
        let contentStart = position
        // Fast path: no escapes, the content is a slice of the input.
        while position < bytes.count {
            position = ByteScanning.skipPlainWords(bytes, from: position)
            guard position < bytes.count else { break }
            let byte = bytes[position]
            if byte == UInt8(ascii: "\"") {
                let slice = UnsafeBufferPointer(rebasing: bytes[contentStart..<position])
                position += 1
                return try makeString(slice, quote: quote)
            }
            if byte == UInt8(ascii: "\\") { break }
            if byte < 0x20 { throw error(expected: "'\"' or an escape sequence (control characters must be escaped)") }
            position += 1
        }
        guard position < bytes.count else { throw error(expected: "'\"' closing the string") }
        scratch.removeAll(keepingCapacity: true)
        scratch.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[contentStart..<position]))
        while position < bytes.count {
            // Copy the run up to the next quote, backslash or control character in one go (a
            // note's text has an escaped newline every few dozen bytes).
            let runStart = position
            position = ByteScanning.skipPlainWords(bytes, from: position)
            while position < bytes.count, bytes[position] >= 0x20, bytes[position] != UInt8(ascii: "\""),
                bytes[position] != UInt8(ascii: "\\")
            {
                position += 1
            }
            scratch.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart..<position]))
            guard position < bytes.count else { break }
            switch bytes[position] {
            case UInt8(ascii: "\""):
                position += 1
                let buffer = scratch
                return try buffer.withUnsafeBufferPointer { (pointer) throws(JSONParseError) -> String in
                    try makeString(pointer, quote: quote)
                }
            case UInt8(ascii: "\\"):
                try parseEscape()
            default:
                throw error(expected: "'\"' or an escape sequence (control characters must be escaped)")
            }
        }
        throw error(expected: "'\"' closing the string")
    }

    private func makeString(_ bytes: UnsafeBufferPointer<UInt8>, quote: Int) throws(JSONParseError) -> String {
        // ASCII is valid UTF-8; `String(validating:)` is generic and costs a metadata lookup per
        // call, which dominated short strings such as keys.
        if knownValidUTF8 || ByteScanning.isASCII(bytes) { return String(decoding: bytes, as: UTF8.self) }
        guard let string = String(validating: bytes, as: UTF8.self) else {
            throw error(kind: .invalidUTF8, at: quote, expected: "a string of valid UTF-8")
        }
        return string
    }

    private mutating func parseEscape() throws(JSONParseError) {
        let escapeStart = position
        position += 1  // '\'
        guard let byte = peek() else { throw error(expected: "an escape character") }
        let simple: UInt8?
        switch byte {
        case UInt8(ascii: "\""): simple = UInt8(ascii: "\"")
        case UInt8(ascii: "\\"): simple = UInt8(ascii: "\\")
        case UInt8(ascii: "/"): simple = UInt8(ascii: "/")
        case UInt8(ascii: "b"): simple = 0x08
        case UInt8(ascii: "f"): simple = 0x0C
        case UInt8(ascii: "n"): simple = 0x0A
        case UInt8(ascii: "r"): simple = 0x0D
        case UInt8(ascii: "t"): simple = 0x09
        case UInt8(ascii: "u"): simple = nil
        default:
            throw error(expected: "an escape character ('\"', '\\', '/', 'b', 'f', 'n', 'r', 't' or 'u')")
        }
        position += 1
        if let simple {
            scratch.append(simple)
            return
        }
        let unit = try parseHex4()
        // A lone surrogate is no character: a String cannot hold it, and turning it into U+FFFD
        // would change the data without a word (issue 13), so the text is refused.
        func loneSurrogate() -> JSONParseError {
            error(kind: .loneSurrogate, at: escapeStart,
                  expected: "a whole character, not the lone UTF-16 surrogate \\u\(String(unit, radix: 16, uppercase: true))")
        }
        var scalar: Unicode.Scalar = "\u{FFFD}"
        if (0xD800...0xDBFF).contains(unit) {
            // A high surrogate combines with an immediately following \uDC00-\uDFFF escape.
            let next = position
            if position + 1 < bytes.count, bytes[position] == UInt8(ascii: "\\"), bytes[position + 1] == UInt8(ascii: "u") {
                position += 2
                let low = try parseHex4()
                if (0xDC00...0xDFFF).contains(low),
                   let combined = Unicode.Scalar(0x10000 + ((UInt32(unit) - 0xD800) << 10) + (UInt32(low) - 0xDC00)) {
                    scalar = combined
                } else {
                    guard replacingLoneSurrogates else { throw loneSurrogate() }
                    position = next  // the next escape stands on its own
                }
            } else if !replacingLoneSurrogates {
                throw loneSurrogate()
            }
        } else if let single = Unicode.Scalar(unit) {
            scalar = single
        } else if !replacingLoneSurrogates {
            throw loneSurrogate()  // a lone low surrogate
        }
        appendUTF8(scalar)
    }

    private mutating func parseHex4() throws(JSONParseError) -> UInt16 {
        var value: UInt16 = 0
        for _ in 0..<4 {
            guard let byte = peek() else { throw error(expected: "a hex digit") }
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
            default: throw error(expected: "a hex digit")
            }
            value = value << 4 | UInt16(digit)
            position += 1
        }
        return value
    }

    private mutating func appendUTF8(_ scalar: Unicode.Scalar) {
        let value = scalar.value
        switch value {
        case 0..<0x80:
            scratch.append(UInt8(value))
        case 0x80..<0x800:
            scratch.append(UInt8(0xC0 | (value >> 6)))
            scratch.append(UInt8(0x80 | (value & 0x3F)))
        case 0x800..<0x10000:
            scratch.append(UInt8(0xE0 | (value >> 12)))
            scratch.append(UInt8(0x80 | ((value >> 6) & 0x3F)))
            scratch.append(UInt8(0x80 | (value & 0x3F)))
        default:
            scratch.append(UInt8(0xF0 | (value >> 18)))
            scratch.append(UInt8(0x80 | ((value >> 12) & 0x3F)))
            scratch.append(UInt8(0x80 | ((value >> 6) & 0x3F)))
            scratch.append(UInt8(0x80 | (value & 0x3F)))
        }
    }

    // MARK: - Helpers

    @inline(__always)
    private func peek() -> UInt8? {
        position < bytes.count ? bytes[position] : nil
    }

    @inline(__always)
    private func isDigit(_ byte: UInt8) -> Bool {
        byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")
    }

    private mutating func skipWhitespace() {
        while position < bytes.count {
            switch bytes[position] {
            case 0x20, 0x0A, 0x0D, 0x09: position += 1
            default: return
            }
        }
    }

    private func error(kind: JSONParseError.Kind = .syntax, at offset: Int? = nil, expected: String) -> JSONParseError {
        let offset = min(offset ?? position, bytes.count)
        var line = 1
        var lineStart = 0
        for index in 0..<offset where bytes[index] == 0x0A {
            line += 1
            lineStart = index + 1
        }
        // Column in characters (grapheme clusters); invalid UTF-8 counts as replacement characters.
        let prefix = String(decoding: UnsafeBufferPointer(rebasing: bytes[lineStart..<offset]), as: UTF8.self)
        return JSONParseError(kind: kind, line: line, column: prefix.count + 1, expected: expected, offset: offset)
    }
}
