/// Why a JSON text could not be parsed, and where (1-based line, column counted in characters).
public struct JSONParseError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The class of failure; most are plain syntax errors.
    public enum Kind: Sendable, Hashable {
        case syntax
        /// Containers nested deeper than `JSONValue.maxNestingDepth`.
        case nestingTooDeep
        /// A string's bytes are not valid UTF-8 (only possible when parsing raw bytes).
        case invalidUTF8
        /// A number too large for a Double (e.g. `1e400`); JSONValue has no infinite numbers.
        case numberOutOfRange
        /// A `\u` escape of half a UTF-16 surrogate pair without its other half.
        case loneSurrogate
    }

    public let kind: Kind
    public let line: Int
    public let column: Int
    /// What the parser expected at that position, e.g. `',' or '}'`.
    public let expected: String
    /// The byte offset into the UTF-8 input.
    public let offset: Int

    public init(kind: Kind = .syntax, line: Int, column: Int, expected: String, offset: Int) {
        self.kind = kind
        self.line = line
        self.column = column
        self.expected = expected
        self.offset = offset
    }

    public var description: String {
        "line \(line), column \(column): expected \(expected)"
    }
}
