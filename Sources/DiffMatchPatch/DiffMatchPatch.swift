/// Google's diff-match-patch, ported from the JavaScript version that Simperium's jsondiff uses.
///
/// Every count (delta numbers, patch offsets, match locations) is in UTF-16 code units, as in
/// JavaScript. Unlike the reference, no returned diff ever splits a surrogate pair.
public struct DiffMatchPatch: Sendable {
    /// Seconds a diff may spend before settling for a coarser result; 0 or less means no limit.
    public var diffTimeout: Double = 1.0
    /// Cost of an empty edit in characters, for `diffCleanupEfficiency`.
    public var diffEditCost = 4
    /// Match quality from 0.0 (perfect only) to 1.0 (anything).
    public var matchThreshold = 0.5
    /// How far from the expected location a match may be (multiplied by the error rate).
    public var matchDistance = 1000
    /// How closely a deletion's text must match when applying a large patch (0.0 to 1.0).
    public var patchDeleteThreshold = 0.5
    /// Context length added around each patch hunk.
    public var patchMargin = 4
    /// Longest pattern the bitap matcher handles (bits in its bit masks; at most 64).
    public var matchMaxBits = 32

    /// Creates an instance with the reference's default settings.
    public init() {}

    var deadline: ContinuousClock.Instant? {
        // Anything beyond a year is "no limit" (and keeps Duration from overflowing).
        guard diffTimeout > 0, diffTimeout < 31_536_000 else { return nil }
        return ContinuousClock.now.advanced(by: .seconds(diffTimeout))
    }

    // MARK: Diff

    /// Differences between two texts, with common prefix/suffix, half-match and line-mode speedups.
    public func diffMain(_ text1: String, _ text2: String, checkLines: Bool = true) -> [Diff] {
        let diffs = diffMainUnits(utf16Units(text1), utf16Units(text2), checkLines: checkLines, deadline: deadline)
        return keepingSurrogatePairsWhole(diffs).map(\.diff)
    }

    /// Removes semantically trivial equalities so the diff reads like a human's.
    public func diffCleanupSemantic(_ diffs: inout [Diff]) {
        var units = unitDiffs(diffs)
        cleanupSemantic(&units)
        diffs = keepingSurrogatePairsWhole(units).map(\.diff)
    }

    /// Shifts single edits sideways to line up with word and line boundaries.
    public func diffCleanupSemanticLossless(_ diffs: inout [Diff]) {
        var units = unitDiffs(diffs)
        cleanupSemanticLossless(&units)
        diffs = keepingSurrogatePairsWhole(units).map(\.diff)
    }

    /// Removes equalities too short to be worth their edit cost (`diffEditCost`).
    public func diffCleanupEfficiency(_ diffs: inout [Diff]) {
        var units = unitDiffs(diffs)
        cleanupEfficiency(&units)
        diffs = keepingSurrogatePairsWhole(units).map(\.diff)
    }

    /// Merges adjacent runs of the same kind and factors out common affixes of edits.
    public func diffCleanupMerge(_ diffs: inout [Diff]) {
        var units = unitDiffs(diffs)
        cleanupMerge(&units)
        diffs = keepingSurrogatePairsWhole(units).map(\.diff)
    }

    /// The source text of a diff (equalities and deletions).
    public func diffText1(_ diffs: [Diff]) -> String {
        var result = ""
        for diff in diffs where diff.operation != .insert { result += diff.text }
        return result
    }

    /// The destination text of a diff (equalities and insertions).
    public func diffText2(_ diffs: [Diff]) -> String {
        var result = ""
        for diff in diffs where diff.operation != .delete { result += diff.text }
        return result
    }

    /// Levenshtein distance of a diff, in UTF-16 code units.
    public func diffLevenshtein(_ diffs: [Diff]) -> Int {
        levenshtein(unitDiffs(diffs))
    }

    /// Maps a UTF-16 offset in text1 to the equivalent offset in text2.
    public func diffXIndex(_ diffs: [Diff], _ location: Int) -> Int {
        xIndex(unitDiffs(diffs), location)
    }

    // MARK: Delta

    /// The compact delta form (`=3\t-2\t+ing`) that turns text1 into text2; counts are UTF-16 units.
    public func diffToDelta(_ diffs: [Diff]) -> String {
        Delta.encode(diffs)
    }

    /// Rebuilds the diff from text1 and a delta; the delta's `=`/`-` counts must total text1's length.
    /// Throws `splitsSurrogatePair` when the text the delta makes would hold half a surrogate
    /// pair (a delta that cuts a pair but leaves whole characters is fine: the runs are repaired).
    public func diffFromDelta(_ text1: String, _ delta: String) throws(DiffMatchPatchError) -> [Diff] {
        let diffs = try Delta.decode(utf16Units(text1), delta)
        try checkWholeResult(diffs)
        return keepingSurrogatePairsWhole(diffs).map(\.diff)
    }

    /// Refuses diffs whose text2 has an unpaired surrogate. text1 is a String, so always whole.
    func checkWholeResult(_ diffs: [UnitDiff]) throws(DiffMatchPatchError) {
        var result: [UInt16] = []
        for diff in diffs where diff.operation != .delete { result += diff.text }
        if let offset = firstUnpairedSurrogate(result) { throw .splitsSurrogatePair(offset: offset) }
    }

    // MARK: Match

    /// Best fuzzy location of `pattern` in `text` near `loc` (UTF-16 offsets), or nil when none
    /// scores within `matchThreshold` (also nil for a pattern longer than `matchMaxBits` found nowhere exactly).
    public func matchMain(_ text: String, _ pattern: String, _ loc: Int) -> Int? {
        matchMainUnits(utf16Units(text), utf16Units(pattern), loc)
    }

    // MARK: Patch

    /// Patches that turn text1 into the text the diffs describe.
    public func patchMake(_ text1: String, _ diffs: [Diff]) -> [Patch] {
        makePatches(utf16Units(text1), unitDiffs(diffs)).map(\.patch)
    }

    /// Patches that turn text1 into text2 (diffed, then cleaned semantically and for efficiency).
    public func patchMake(_ text1: String, _ text2: String) -> [Patch] {
        let source = utf16Units(text1)
        let diffs = diffsForPatch(source, utf16Units(text2))
        return makePatches(source, diffs).map(\.patch)
    }

    /// Patches from a diff alone (text1 is rebuilt from it).
    public func patchMake(_ diffs: [Diff]) -> [Patch] {
        let units = unitDiffs(diffs)
        return makePatches(sourceUnits(of: units), units).map(\.patch)
    }

    /// Applies patches with fuzzy matching; `applied` says which hunks found a place.
    public func patchApply(_ patches: [Patch], to text: String) -> (text: String, applied: [Bool]) {
        let (result, applied) = applyPatches(patches.map(UnitPatch.init), to: utf16Units(text))
        return (makeString(result), applied)
    }

    /// Patches in their textual form (`@@ -1,3 +1,4 @@` headers, URI-escaped lines).
    public func patchToText(_ patches: [Patch]) -> String {
        patches.map(PatchText.render).joined()
    }

    /// Parses the textual form written by `patchToText`.
    public func patchFromText(_ text: String) throws(DiffMatchPatchError) -> [Patch] {
        try PatchText.parse(text)
    }
}
