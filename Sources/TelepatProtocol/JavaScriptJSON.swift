/// JSON text as JavaScript's `JSON.stringify(JSON.parse(text))` writes it: compact, members in
/// the order they were written (the last of a repeated name, in the first one's place), numbers
/// and strings as JavaScript renders them.
///
/// Telepat names a filtered channel by this text of its filters (the SDK's
/// `subscriptionKeyForOptions` appends `:filter:` + base64 of `JSON.stringify(filters)`), so the
/// server derives the same text from the body the SDK sent. `JSONValue` cannot: it keeps no
/// member order.
public enum JavaScriptJSON {
    /// The whole `text`, stringified.
    public static func stringify(_ text: some Collection<UInt8>) throws(TelepatProtocolError) -> String {
        var reader = Reader(bytes: Array(text))
        let value = try reader.document()
        return value.rendered
    }

    /// The member `name` of the object `text` is, stringified; nil when it is absent or null.
    public static func member(_ name: String, of text: some Collection<UInt8>) throws(TelepatProtocolError) -> String? {
        var reader = Reader(bytes: Array(text))
        guard case .object(let members) = try reader.document() else { return nil }
        guard let value = members.last(where: { $0.name == name })?.value, value != .null else { return nil }
        return value.rendered
    }

    /// `text` as JavaScript's `JSON.stringify` quotes a string.
    public static func quoted(_ text: String) -> String {
        var result = ""
        quote(Array(text.utf16), into: &result)
        return result
    }

    // MARK: The value read, in order

    indirect enum Value: Equatable {
        case null
        case literal(String)
        /// A string as UTF-16 code units (a lone surrogate escape is kept as JavaScript keeps it).
        case string([UInt16])
        case array([Value])
        case object([(name: String, value: Value)])

        static func == (a: Value, b: Value) -> Bool {
            switch (a, b) {
            case (.null, .null): return true
            case (.literal(let x), .literal(let y)): return x == y
            case (.string(let x), .string(let y)): return x == y
            case (.array(let x), .array(let y)): return x == y
            case (.object(let x), .object(let y)): return x.map(\.name) == y.map(\.name) && x.map(\.value) == y.map(\.value)
            default: return false
            }
        }

        var rendered: String {
            var result = ""
            render(into: &result)
            return result
        }

        func render(into result: inout String) {
            switch self {
            case .null: result += "null"
            case .literal(let text): result += text
            case .string(let units):
                quote(units, into: &result)
            case .array(let items):
                result += "["
                for (index, item) in items.enumerated() {
                    if index > 0 { result += "," }
                    item.render(into: &result)
                }
                result += "]"
            case .object(let members):
                result += "{"
                for (index, member) in members.enumerated() {
                    if index > 0 { result += "," }
                    result += quoted(member.name) + ":"
                    member.value.render(into: &result)
                }
                result += "}"
            }
        }
    }

    /// ECMAScript QuoteJSONString: a surrogate pair stays one character, a lone surrogate is
    /// escaped (as ES2019's well-formed `JSON.stringify` does).
    private static func quote(_ units: [UInt16], into result: inout String) {
        result += "\""
        var index = 0
        while index < units.count {
            let unit = units[index]
            index += 1
            switch unit {
            case 0x22: result += "\\\""
            case 0x5C: result += "\\\\"
            case 0x08: result += "\\b"
            case 0x0C: result += "\\f"
            case 0x0A: result += "\\n"
            case 0x0D: result += "\\r"
            case 0x09: result += "\\t"
            case 0xD800..<0xDC00 where index < units.count && (0xDC00..<0xE000).contains(units[index]):
                let low = units[index]
                index += 1
                let scalar = 0x10000 + ((UInt32(unit) - 0xD800) << 10) + (UInt32(low) - 0xDC00)
                result.unicodeScalars.append(Unicode.Scalar(scalar)!)
            case 0..<0x20, 0xD800..<0xE000:
                let hex = String(unit, radix: 16)
                result += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default:
                result.unicodeScalars.append(Unicode.Scalar(unit)!)
            }
        }
        result += "\""
    }

    /// JavaScript's Number::toString of a finite double (ECMA-262 6.1.6.1.20), from Swift's
    /// shortest round-trip digits.
    static func numberText(_ value: Double) -> String {
        guard value.isFinite else { return "null" }
        if value == 0 { return "0" }
        let sign = value < 0 ? "-" : ""
        let swift = "\(value.magnitude)"
        let parts = swift.split(separator: "e")
        let exponent = parts.count > 1 ? Int(parts[1]) ?? 0 : 0
        let mantissa = parts[0].split(separator: ".", omittingEmptySubsequences: false)
        let whole = String(mantissa[0])
        let fraction = mantissa.count > 1 ? String(mantissa[1]) : ""
        var digits = Array(whole + fraction)
        var point = whole.count + exponent
        while digits.first == "0" {
            digits.removeFirst()
            point -= 1
        }
        while digits.last == "0" { digits.removeLast() }
        let k = digits.count
        let n = point
        let text = String(digits)
        if k <= n && n <= 21 { return sign + text + String(repeating: "0", count: n - k) }
        if 0 < n && n <= 21 { return sign + String(digits[..<n]) + "." + String(digits[n...]) }
        if -6 < n && n <= 0 { return sign + "0." + String(repeating: "0", count: -n) + text }
        let e = n - 1
        let exponentText = "e" + (e < 0 ? "-" : "+") + String(e.magnitude)
        if k == 1 { return sign + text + exponentText }
        return sign + String(digits[0]) + "." + String(digits[1...]) + exponentText
    }

    // MARK: Reading

    private struct Reader {
        let bytes: [UInt8]
        var index = 0
        static let maxDepth = 256

        init(bytes: [UInt8]) { self.bytes = bytes }

        mutating func document() throws(TelepatProtocolError) -> Value {
            let value = try self.value(depth: 0)
            skipSpace()
            guard index == bytes.count else { throw .invalidJSON("text after the value") }
            return value
        }

        mutating func skipSpace() {
            while index < bytes.count, [0x20, 0x09, 0x0A, 0x0D].contains(bytes[index]) { index += 1 }
        }

        mutating func value(depth: Int) throws(TelepatProtocolError) -> Value {
            guard depth < Self.maxDepth else { throw .invalidJSON("nested too deeply") }
            skipSpace()
            guard index < bytes.count else { throw .invalidJSON("unexpected end") }
            switch bytes[index] {
            case UInt8(ascii: "{"):
                index += 1
                var members: [(name: String, value: Value)] = []
                skipSpace()
                if index < bytes.count, bytes[index] == UInt8(ascii: "}") {
                    index += 1
                    return .object(members)
                }
                while true {
                    skipSpace()
                    guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { throw .invalidJSON("expected a member name") }
                    let nameUnits = try string()
                    let name = String(decoding: nameUnits, as: UTF16.self)
                    skipSpace()
                    guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw .invalidJSON("expected ':'") }
                    index += 1
                    let member = try value(depth: depth + 1)
                    // JSON.parse keeps a repeated name's place and its last value.
                    if let existing = members.firstIndex(where: { $0.name == name }) {
                        members[existing].value = member
                    } else {
                        members.append((name, member))
                    }
                    skipSpace()
                    guard index < bytes.count else { throw .invalidJSON("unexpected end") }
                    if bytes[index] == UInt8(ascii: ",") {
                        index += 1
                        continue
                    }
                    guard bytes[index] == UInt8(ascii: "}") else { throw .invalidJSON("expected ',' or '}'") }
                    index += 1
                    return .object(members)
                }
            case UInt8(ascii: "["):
                index += 1
                var items: [Value] = []
                skipSpace()
                if index < bytes.count, bytes[index] == UInt8(ascii: "]") {
                    index += 1
                    return .array(items)
                }
                while true {
                    items.append(try value(depth: depth + 1))
                    skipSpace()
                    guard index < bytes.count else { throw .invalidJSON("unexpected end") }
                    if bytes[index] == UInt8(ascii: ",") {
                        index += 1
                        continue
                    }
                    guard bytes[index] == UInt8(ascii: "]") else { throw .invalidJSON("expected ',' or ']'") }
                    index += 1
                    return .array(items)
                }
            case UInt8(ascii: "\""):
                return .string(try string())
            case UInt8(ascii: "t"): return try word("true")
            case UInt8(ascii: "f"): return try word("false")
            case UInt8(ascii: "n"):
                _ = try word("null")
                return .null
            default:
                return try number()
            }
        }

        mutating func word(_ text: String) throws(TelepatProtocolError) -> Value {
            let expected = Array(text.utf8)
            guard bytes.count - index >= expected.count, Array(bytes[index..<index + expected.count]) == expected else {
                throw .invalidJSON("unexpected character")
            }
            index += expected.count
            return .literal(text)
        }

        mutating func number() throws(TelepatProtocolError) -> Value {
            let start = index
            func digits() -> Int {
                let first = index
                while index < bytes.count, bytes[index] >= UInt8(ascii: "0"), bytes[index] <= UInt8(ascii: "9") { index += 1 }
                return index - first
            }
            if index < bytes.count, bytes[index] == UInt8(ascii: "-") { index += 1 }
            let wholeStart = index
            let wholeDigits = digits()
            guard wholeDigits > 0, !(wholeDigits > 1 && bytes[wholeStart] == UInt8(ascii: "0")) else {
                throw .invalidJSON("malformed number")
            }
            if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
                index += 1
                guard digits() > 0 else { throw .invalidJSON("malformed number") }
            }
            if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
                index += 1
                if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") { index += 1 }
                guard digits() > 0 else { throw .invalidJSON("malformed number") }
            }
            let text = String(decoding: bytes[start..<index], as: UTF8.self)
            guard let value = Double(text) else { throw .invalidJSON("malformed number") }
            return .literal(JavaScriptJSON.numberText(value))
        }

        /// A string literal's value as UTF-16 code units (escapes decoded, lone surrogates kept).
        mutating func string() throws(TelepatProtocolError) -> [UInt16] {
            index += 1
            var units: [UInt16] = []
            var rawStart = index
            func flushRaw(_ end: Int) throws(TelepatProtocolError) {
                guard rawStart < end else { return }
                guard let text = String(validating: bytes[rawStart..<end], as: UTF8.self) else { throw .invalidJSON("string is not UTF-8") }
                units += text.utf16
            }
            while index < bytes.count {
                let byte = bytes[index]
                if byte == UInt8(ascii: "\"") {
                    try flushRaw(index)
                    index += 1
                    return units
                }
                guard byte >= 0x20 else { throw .invalidJSON("control character in a string") }
                guard byte == UInt8(ascii: "\\") else {
                    index += 1
                    continue
                }
                try flushRaw(index)
                index += 1
                guard index < bytes.count else { break }
                let escape = bytes[index]
                index += 1
                switch escape {
                case UInt8(ascii: "\""): units.append(0x22)
                case UInt8(ascii: "\\"): units.append(0x5C)
                case UInt8(ascii: "/"): units.append(0x2F)
                case UInt8(ascii: "b"): units.append(0x08)
                case UInt8(ascii: "f"): units.append(0x0C)
                case UInt8(ascii: "n"): units.append(0x0A)
                case UInt8(ascii: "r"): units.append(0x0D)
                case UInt8(ascii: "t"): units.append(0x09)
                case UInt8(ascii: "u"):
                    guard bytes.count - index >= 4, let unit = UInt16(String(decoding: bytes[index..<index + 4], as: UTF8.self), radix: 16) else {
                        throw .invalidJSON("malformed \\u escape")
                    }
                    units.append(unit)
                    index += 4
                default:
                    throw .invalidJSON("unknown escape")
                }
                rawStart = index
            }
            throw .invalidJSON("unterminated string")
        }
    }
}
