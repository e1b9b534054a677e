/// The kind of change a `Diff` describes.
public enum DiffOperation: Sendable, Hashable {
    case delete, insert, equal
}

/// One run of a diff: text deleted from text1, inserted into text2, or common to both.
public struct Diff: Sendable, Hashable, CustomStringConvertible {
    /// What happens to `text`.
    public var operation: DiffOperation
    /// The text; never splits a UTF-16 surrogate pair.
    public var text: String

    /// Creates a diff run.
    public init(_ operation: DiffOperation, _ text: String) {
        self.operation = operation
        self.text = text
    }

    /// Debug form matching the reference's `Diff(op,"text")`.
    public var description: String {
        "Diff(\(operation),\"\(text)\")"
    }
}

/// Errors of the DiffMatchPatch module: malformed deltas and patch texts.
public enum DiffMatchPatchError: Error, Sendable, Hashable {
    /// A delta token has a bad operation, a bad number or a bad percent-escape.
    case invalidDelta(String)
    /// The delta's `=`/`-` counts do not add up to the source text's UTF-16 length.
    case deltaLengthMismatch(expected: Int, actual: Int)
    /// A patch text has a bad header, mode character or percent-escape.
    case invalidPatchText(String)
    /// Applying the delta would leave half of a surrogate pair unpaired at this UTF-16 offset of
    /// the result: its runs cut an astral character (an emoji) and keep or insert only one half.
    /// No String can hold that text; the lenient reading turned the halves into U+FFFD and
    /// silently changed the user's text (issue 20), so such a delta is refused.
    case splitsSurrogatePair(offset: Int)
}
