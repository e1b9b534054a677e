/// An object key, distinct by its Unicode code points.
///
/// Swift's `String ==` and hash are canonical equivalence: `"caf\u{E9}"` and `"cafe\u{301}"` are
/// one String key, so a `[String: JSONValue]` merged two JSON keys that every other JSON
/// implementation keeps apart (issue 13: a rename between them diffed as `{}`, parsing
/// `{"\u00e9":1,"e\u0301":2}` kept one member). A key compares, hashes and sorts by its UTF-8
/// bytes, which is code point order, as the renderers' sorted keys are.
public struct JSONKey: Hashable, Comparable, Sendable {
    /// The key's text, exactly as it was parsed or made.
    public let string: String

    public init(_ string: String) {
        self.string = string
    }

    public static func == (lhs: JSONKey, rhs: JSONKey) -> Bool {
        exactlyEqual(lhs.string, rhs.string)
    }

    public func hash(into hasher: inout Hasher) {
        var string = string
        string.withUTF8 { hasher.combine(bytes: UnsafeRawBufferPointer($0)) }
    }

    /// Code point order (UTF-8 byte order), as Python's `sort_keys` sorts.
    public static func < (lhs: JSONKey, rhs: JSONKey) -> Bool {
        codePointOrder(lhs.string, rhs.string)
    }
}

/// Literal keys (`["title": ...]`, `["tag\(n)": ...]`) read as they did when keys were Strings.
extension JSONKey: ExpressibleByStringInterpolation {
    public init(stringLiteral value: String) {
        self.init(value)
    }
}

extension JSONKey: CustomStringConvertible, CustomDebugStringConvertible {
    public var description: String { string }
    public var debugDescription: String { string.debugDescription }
}
