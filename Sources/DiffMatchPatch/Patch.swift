/// One hunk of a patch: diffs with context, and where they apply (all counts in UTF-16 code units).
public struct Patch: Sendable, Hashable, CustomStringConvertible {
    /// The hunk's diffs, context equalities included.
    public var diffs: [Diff]
    /// Offset of the hunk in the source text.
    public var start1: Int
    /// Offset of the hunk in the destination text.
    public var start2: Int
    /// Length of the hunk in the source text.
    public var length1: Int
    /// Length of the hunk in the destination text.
    public var length2: Int

    /// Creates a hunk.
    public init(diffs: [Diff] = [], start1: Int = 0, start2: Int = 0, length1: Int = 0, length2: Int = 0) {
        self.diffs = diffs
        self.start1 = start1
        self.start2 = start2
        self.length1 = length1
        self.length2 = length2
    }

    /// The hunk in GNU-diff-like text form (`@@ -1,3 +1,4 @@` and escaped lines), as `patch_toText` writes it.
    public var description: String {
        PatchText.render(self)
    }
}
