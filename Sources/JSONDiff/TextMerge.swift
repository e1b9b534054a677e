import DiffMatchPatch

/// Two concurrent `d`/`dL` deltas of the same base text merged exactly, by operational
/// transformation over their runs (UTF-16 positions), instead of the reference's fuzzy
/// re-application of the local delta as patches, which can duplicate or drop text when both
/// sides edited close together. Nothing either side typed is lost: deletes of the same text
/// happen once (overlapping deletes remove the union), and an insert inside text the other side
/// deleted is kept. Equal inserts at the same place are one edit made twice and are kept once.
struct TextMerge {
    /// The base text with both deltas.
    let mergedText: String
    /// The local delta restated against the remote result: applying it there gives `mergedText`.
    let rebasedDelta: String
    /// Whether the rebased delta changes anything (false when the remote already did it all).
    let changesRemote: Bool

    /// Merges `local` and `remote`, both deltas of `base`; a delta that does not fit is a typed error.
    init(local: String, remote: String, base: String) throws(JSONDiffError) {
        let remoteDiffs = try TextDelta.diffs(remote, of: base)
        let localDiffs = try TextDelta.diffs(local, of: base)
        let baseUnits = Array(base.utf16)
        var segments = Self.segments(local: Run.runs(localDiffs), remote: Run.runs(remoteDiffs), baseCount: baseUnits.count)
        if segments.contains(where: \.isTie) {
            Self.orderTies(&segments, likeReferenceOf: localDiffs, base: base, baseUnits: baseUnits, remote: remoteDiffs)
        }
        var delta = DeltaWriter()
        var mergedUnits: [UInt16] = []
        for segment in segments {
            switch segment {
            case .kept(let range):
                delta.keep(range.count)
                mergedUnits += baseUnits[range]
            case .remoteInsert(let units):
                delta.keep(units.count)
                mergedUnits += units
            case .localDelete(let range):
                delta.delete(range.count)
            case .localInsert(let units):
                delta.insert(units)
                mergedUnits += units
            case .tie(let mine, let theirs, let localFirst):
                if localFirst {
                    delta.insert(mine)
                    delta.keep(theirs.count)
                    mergedUnits += mine + theirs
                } else {
                    delta.keep(theirs.count)
                    delta.insert(mine)
                    mergedUnits += theirs + mine
                }
            }
        }
        mergedText = String(decoding: mergedUnits, as: UTF16.self)
        rebasedDelta = delta.text
        changesRemote = delta.changes
    }

    /// One run of a delta over the base: keep or delete `count` units, or insert units.
    enum Run {
        case keep(Int)
        case delete(Int)
        case insert([UInt16])

        /// The runs of diffs; `diffFromDelta` has already moved every run boundary off the
        /// middle of a surrogate pair, so every position below is a scalar boundary.
        static func runs(_ diffs: [Diff]) -> [Run] {
            var runs: [Run] = []
            runs.reserveCapacity(diffs.count)
            for diff in diffs where !diff.text.isEmpty {
                switch diff.operation {
                case .equal: runs.append(.keep(diff.text.utf16.count))
                case .delete: runs.append(.delete(diff.text.utf16.count))
                case .insert: runs.append(.insert(Array(diff.text.utf16)))
                }
            }
            return runs
        }
    }

    /// A piece of the merged result, by where its text comes from.
    enum Segment {
        /// Base text (UTF-16 offsets) neither side deleted.
        case kept(Range<Int>)
        /// Base text only the local side deleted (still in the remote text).
        case localDelete(Range<Int>)
        /// Text the remote side inserted.
        case remoteInsert([UInt16])
        /// Text the local side inserted.
        case localInsert([UInt16])
        /// Different texts both sides inserted at the same base position.
        case tie(local: [UInt16], remote: [UInt16], localFirst: Bool)

        var isTie: Bool {
            if case .tie = self { return true }
            return false
        }
    }

    /// Reads runs one base position at a time.
    struct Cursor {
        let runs: [Run]
        var index = 0
        /// Units of the current keep/delete run already walked over.
        var consumed = 0

        /// All inserts at the current position, joined.
        mutating func takeInserts() -> [UInt16] {
            var units: [UInt16] = []
            while index < runs.count, case .insert(let inserted) = runs[index] {
                units += inserted
                index += 1
            }
            return units
        }

        /// The current keep/delete run: whether it deletes, and how many units are left of it.
        var current: (deletes: Bool, remaining: Int)? {
            guard index < runs.count else { return nil }
            switch runs[index] {
            case .keep(let count): return (false, count - consumed)
            case .delete(let count): return (true, count - consumed)
            case .insert: return nil
            }
        }

        mutating func advance(by count: Int) {
            guard let current else { return }
            if count >= current.remaining {
                index += 1
                consumed = 0
            } else {
                consumed += count
            }
        }
    }

    /// Walks both deltas over the base together. Both account for the whole base (checked by
    /// decoding), so their keep/delete runs end together.
    static func segments(local: [Run], remote: [Run], baseCount: Int) -> [Segment] {
        var mine = Cursor(runs: local)
        var theirs = Cursor(runs: remote)
        var segments: [Segment] = []
        var position = 0
        while true {
            let localInsert = mine.takeInserts()
            let remoteInsert = theirs.takeInserts()
            switch (localInsert.isEmpty, remoteInsert.isEmpty) {
            case (false, false):
                // The same text typed at the same place on both sides is one edit: keep it once.
                segments.append(localInsert == remoteInsert
                    ? .remoteInsert(remoteInsert) : .tie(local: localInsert, remote: remoteInsert, localFirst: true))
            case (false, true): segments.append(.localInsert(localInsert))
            case (true, false): segments.append(.remoteInsert(remoteInsert))
            case (true, true): break
            }
            guard let localRun = mine.current, let remoteRun = theirs.current else { break }
            let count = min(localRun.remaining, remoteRun.remaining, baseCount - position)
            guard count > 0 else { break }  // unreachable for decoded deltas; never loop forever
            let range = position..<position + count
            switch (localRun.deletes, remoteRun.deletes) {
            case (false, false): append(.kept(range), to: &segments)
            case (true, false): append(.localDelete(range), to: &segments)
            case (_, true): break  // deleted remotely (perhaps on both sides): gone once
            }
            mine.advance(by: count)
            theirs.advance(by: count)
            position += count
        }
        return segments
    }

    /// Appends, joining a kept or locally deleted piece to the same kind of piece just before it.
    private static func append(_ segment: Segment, to segments: inout [Segment]) {
        switch (segments.last, segment) {
        case (.kept(let previous)?, .kept(let next)) where previous.upperBound == next.lowerBound:
            segments[segments.count - 1] = .kept(previous.lowerBound..<next.upperBound)
        case (.localDelete(let previous)?, .localDelete(let next)) where previous.upperBound == next.lowerBound:
            segments[segments.count - 1] = .localDelete(previous.lowerBound..<next.upperBound)
        default:
            segments.append(segment)
        }
    }

    /// The order of both inserts at one position has no right answer; the reference's conformance
    /// cases ("list, transform4/5/6 (dmp)") fix it case by case through where its fuzzy patch
    /// lands. So when the reference's result is one of the exact merges, its order is taken for
    /// every tie; otherwise (it duplicated or lost text) every tie puts the local insert first,
    /// as list (`L`) transforms do.
    private static func orderTies(_ segments: inout [Segment], likeReferenceOf localDiffs: [Diff],
                                  base: String, baseUnits: [UInt16], remote remoteDiffs: [Diff]) {
        let dmp = TextDelta.dmp
        let remoteText = dmp.diffText2(remoteDiffs)
        let reference = Array(dmp.patchApply(dmp.patchMake(base, localDiffs), to: remoteText).text.utf16)
        var offset = 0
        var orders: [Bool] = []
        func matches(_ units: some Collection<UInt16>) -> Bool {
            guard offset + units.count <= reference.count,
                  reference[offset..<offset + units.count].elementsEqual(units) else { return false }
            offset += units.count
            return true
        }
        for segment in segments {
            switch segment {
            case .kept(let range):
                guard matches(baseUnits[range]) else { return }
            case .remoteInsert(let units), .localInsert(let units):
                guard matches(units) else { return }
            case .localDelete:
                break
            case .tie(let mine, let theirs, _):
                // Both orders have the same length, so at most one of them can match here.
                if matches(mine + theirs) {
                    orders.append(true)
                } else if matches(theirs + mine) {
                    orders.append(false)
                } else {
                    return
                }
            }
        }
        guard offset == reference.count else { return }
        var next = orders.makeIterator()
        for index in segments.indices {
            if case .tie(let mine, let theirs, _) = segments[index], let localFirst = next.next() {
                segments[index] = .tie(local: mine, remote: theirs, localFirst: localFirst)
            }
        }
    }

    /// Writes a delta run by run, joining neighbouring runs of the same kind.
    struct DeltaWriter {
        private var tokens: [String] = []
        private var pending: (operation: DiffOperation, count: Int, units: [UInt16])?
        /// Whether any run inserts or deletes.
        private(set) var changes = false

        mutating func keep(_ count: Int) { add(.equal, count: count, units: []) }
        mutating func delete(_ count: Int) { add(.delete, count: count, units: []) }
        mutating func insert(_ units: [UInt16]) { add(.insert, count: units.count, units: units) }

        private mutating func add(_ operation: DiffOperation, count: Int, units: [UInt16]) {
            guard count > 0 else { return }
            if operation != .equal { changes = true }
            if let run = pending, run.operation == operation {
                pending = (operation, run.count + count, run.units + units)
                return
            }
            flush()
            pending = (operation, count, units)
        }

        private mutating func flush() {
            guard let run = pending else { return }
            pending = nil
            switch run.operation {
            case .equal: tokens.append("=\(run.count)")
            case .delete: tokens.append("-\(run.count)")
            // The insert's escaping (encodeURI with spaces kept) is the codec's, so let it write it.
            case .insert: tokens.append(TextDelta.dmp.diffToDelta([Diff(.insert, String(decoding: run.units, as: UTF16.self))]))
            }
        }

        /// The delta: tab-joined `=N`, `-N`, `+text` tokens.
        var text: String {
            var copy = self
            copy.flush()
            return copy.tokens.joined(separator: "\t")
        }
    }
}
