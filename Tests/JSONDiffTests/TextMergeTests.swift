import JSONDiff
import PropertyBased
import Testing

/// Concurrent `d`/`dL` edits of the same base are merged exactly: nothing typed is duplicated or
/// lost (the reference's fuzzy patching did both; found by the sync engine's randomized test).
struct TextMergeTests {
    /// The merged text and the rebased local diff of a `d`/`d` conflict on key "t".
    func mergeText(_ base: String, local: DiffOp, remote: DiffOp) throws -> (text: String, rebased: DiffOp?) {
        let s: JSONObject = ["t": .string(base)]
        let rebased = try JSONDiffing.transform(["t": local], over: ["t": remote], base: s)
        let merged = try JSONDiffing.apply(rebased, to: JSONDiffing.apply(["t": remote], to: s))
        return (try #require(merged["t"]?.stringValue), rebased["t"])
    }

    func occurrences(of token: String, in text: String) -> Int {
        text.components(separatedBy: token).count - 1
    }

    @Test func theSyncEnginesCounterexampleKeepsEveryToken() throws {
        let s: JSONObject = ["t": "<2>start<15>"]
        let local = JSONDiffing.diff(from: s, to: ["t": "<37><2><16>start<12><15>"])
        let remote = JSONDiffing.diff(from: s, to: ["t": "<2><34><49>start<15>"])
        let rebased = try JSONDiffing.transform(local, over: remote, base: s)
        let merged = try #require(JSONDiffing.apply(rebased, to: JSONDiffing.apply(remote, to: s))["t"]?.stringValue)
        for token in ["<37>", "<16>", "<12>", "<34>", "<49>", "<2>", "start", "<15>"] {
            #expect(occurrences(of: token, in: merged) == 1, "\(token) in \(merged)")
        }
        #expect(merged.count == "<2>start<15>".count + "<37><16><12><34><49>".count)
        #expect(merged == "<37><2><16><34><49>start<12><15>")
    }

    @Test func insertsAtTheSamePlaceAreBothKept() throws {
        // In the order the reference's patch puts them, as its conformance cases ask for `dL`.
        #expect(try mergeText("ab", local: .stringDelta("=1\t+X\t=1"), remote: .stringDelta("=1\t+Y\t=1")).text == "aYXb")
        // The same text typed at the same place on both sides is one edit.
        let same = try mergeText("ab", local: .stringDelta("=1\t+X\t=1"), remote: .stringDelta("=1\t+X\t=1"))
        #expect(same.text == "aXb")
        #expect(same.rebased == nil)
    }

    @Test func deletesHappenOnceAndOverlapsRemoveTheUnion() throws {
        let same = try mergeText("abcdef", local: .stringDelta("=1\t-3\t=2"), remote: .stringDelta("=1\t-3\t=2"))
        #expect(same.text == "aef")
        #expect(same.rebased == nil)
        #expect(try mergeText("abcdef", local: .stringDelta("=1\t-3\t=2"), remote: .stringDelta("=2\t-3\t=1")).text == "af")
        #expect(try mergeText("abcdef", local: .stringDelta("-6"), remote: .stringDelta("=2\t-1\t=3")).text == "")
    }

    @Test func anInsertInsideTextTheOtherSideDeletedIsKept() throws {
        #expect(try mergeText("abcdef", local: .stringDelta("=3\t+XY\t=3"), remote: .stringDelta("=1\t-4\t=1")).text == "aXYf")
        #expect(try mergeText("abcdef", local: .stringDelta("=1\t-4\t=1"), remote: .stringDelta("=3\t+XY\t=3")).text == "aXYf")
        // Both replaced the same word: both replacements are kept.
        #expect(try mergeText("a bc d", local: .stringDelta("=2\t-2\t+xy\t=2"), remote: .stringDelta("=2\t-2\t+zw\t=2")).text == "a xyzw d")
    }

    @Test func theRebasedDeltaIsExactAndKeepsSurrogatePairsWhole() throws {
        let merge = try mergeText("😀a😀", local: .stringDelta("=2\t+🎉\t=3"), remote: .stringDelta("=2\t-1\t+b\t=2"))
        #expect(merge.text == "😀🎉b😀")
        #expect(merge.rebased == .stringDelta("=2\t+%F0%9F%8E%89\t=3"))
        // A foreign delta whose runs cut an emoji in half (but keep it whole) merges whole characters.
        let cut = try mergeText("😀x", local: .stringDelta("=1\t=1\t+y\t=1"), remote: .stringDelta("=1\t=2\t+z"))
        #expect(cut.text == "😀yxz")
        #expect(cut.rebased == .stringDelta("=2\t+y\t=2"))
    }

    @Test func listTextInsertsAtTheSamePlaceKeepEveryItem() throws {
        let policy = try DiffPolicy(json: ["l": ["otype": "list_dmp"]])
        let s: JSONObject = ["l": ["a", "b", "c"]]
        let a: JSONObject = ["l": ["a", "x", "c", "y"]]
        let b: JSONObject = ["l": ["z", "a", "c", "w"]]
        let local = JSONDiffing.diff(from: s, to: a, policy: policy)
        let remote = JSONDiffing.diff(from: s, to: b, policy: policy)
        let rebased = try JSONDiffing.transform(local, over: remote, base: s, policy: policy)
        let merged = try JSONDiffing.apply(rebased, to: JSONDiffing.apply(remote, to: s))
        let items = try #require(merged["l"]?.arrayValue).compactMap(\.stringValue)
        #expect(items.sorted() == ["a", "c", "w", "x", "y", "z"])
        #expect(items.firstIndex(of: "a").map { $0 < items.firstIndex(of: "c") ?? 0 } == true)
    }

    // MARK: - Properties

    /// Exact deltas from random edit scripts: the merge is determined, so it is checked whole.
    @Test func randomScriptsMergeExactly() async {
        await propertyCheck(count: 300, input: Gen.json) { random throws in
            var random = RandomText(rng: random.rng)
            let base = random.baseText()
            let local = random.script(over: base, side: "L")
            let remote = random.script(over: base, side: "R")
            let context = "base: \(base.debugDescription) local: \(local.delta) remote: \(remote.delta)"
            let first = try mergeText(base, local: .stringDelta(local.delta), remote: .stringDelta(remote.delta))
            let again = try mergeText(base, local: .stringDelta(local.delta), remote: .stringDelta(remote.delta))
            #expect(first.text == again.text && first.rebased == again.rebased, "not deterministic; \(context)")
            for marker in local.markers + remote.markers {
                #expect(occurrences(of: marker, in: first.text) == 1, "\(marker); merged \(first.text.debugDescription); \(context)")
            }
            // Without the markers, what is left is the base minus what either side deleted.
            let deleted = local.deleted.union(remote.deleted)
            let expectedBase = String(String.UnicodeScalarView(
                base.unicodeScalars.enumerated().filter { !deleted.contains($0.offset) }.map(\.element)))
            #expect(RandomText.withoutMarkers(first.text) == expectedBase, "merged \(first.text.debugDescription); \(context)")
        }
    }

    /// Edits through the differ (whose runs are not the scripts'): every marker exactly once, every
    /// base character both sides kept still there, deterministic.
    @Test func randomEditsThroughTheDifferKeepEverything() async {
        await propertyCheck(count: 300, input: Gen.json) { random throws in
            var random = RandomText(rng: random.rng)
            let base = random.baseText()
            let local = random.script(over: base, side: "L")
            let remote = random.script(over: base, side: "R")
            let s: JSONObject = ["t": .string(base)]
            let localDiff = JSONDiffing.diff(from: s, to: ["t": .string(local.text)])
            let remoteDiff = JSONDiffing.diff(from: s, to: ["t": .string(remote.text)])
            let context = "base: \(base.debugDescription) local: \(local.text.debugDescription) remote: \(remote.text.debugDescription)"
            let rebased = try JSONDiffing.transform(localDiff, over: remoteDiff, base: s)
            #expect(try JSONDiffing.transform(localDiff, over: remoteDiff, base: s) == rebased, "\(context)")
            let merged = try #require(JSONDiffing.apply(rebased, to: JSONDiffing.apply(remoteDiff, to: s))["t"]?.stringValue)
            for marker in local.markers + remote.markers {
                #expect(occurrences(of: marker, in: merged) == 1, "\(marker); merged \(merged.debugDescription); \(context)")
            }
            let scalars = Set(merged.unicodeScalars)
            for (offset, scalar) in base.unicodeScalars.enumerated()
            where !local.deleted.contains(offset) && !remote.deleted.contains(offset) {
                #expect(scalars.contains(scalar), "\(scalar) lost; merged \(merged.debugDescription); \(context)")
            }
        }
    }

    /// The same for lists diffed as text (`dL`): every inserted item once, every item both kept once.
    @Test func randomListEditsAsTextKeepEveryItem() async {
        let policy = try? DiffPolicy(json: ["l": ["otype": "list_dmp"]])
        await propertyCheck(count: 200, input: Gen.json) { random throws in
            var random = RandomText(rng: random.rng)
            let base = (0..<random.int(0...8)).map { "item \($0) \(random.baseText())" }
            let local = random.listScript(over: base, side: "L")
            let remote = random.listScript(over: base, side: "R")
            let s: JSONObject = ["l": .array(base.map(JSONValue.string))]
            let localDiff = JSONDiffing.diff(from: s, to: ["l": .array(local.items.map(JSONValue.string))], policy: policy)
            let remoteDiff = JSONDiffing.diff(from: s, to: ["l": .array(remote.items.map(JSONValue.string))], policy: policy)
            let context = "base: \(base) local: \(local.items) remote: \(remote.items)"
            let rebased = try JSONDiffing.transform(localDiff, over: remoteDiff, base: s, policy: policy)
            let merged = try #require(JSONDiffing.apply(rebased, to: JSONDiffing.apply(remoteDiff, to: s))["l"]?.arrayValue)
                .compactMap(\.stringValue)
            for item in local.inserted + remote.inserted {
                #expect(merged.filter { $0 == item }.count == 1, "\(item); merged \(merged); \(context)")
            }
            for (index, item) in base.enumerated() {
                let expected = local.deleted.contains(index) || remote.deleted.contains(index) ? 0 : 1
                #expect(merged.filter { $0 == item }.count == expected, "\(item); merged \(merged); \(context)")
            }
        }
    }
}

/// Random texts of distinct characters (emoji included) and random edit scripts over them whose
/// inserts are unique markers written with characters no base text uses.
struct RandomText {
    var rng: SeededRNG

    /// Base characters: each used at most once per text, so every kept one can be found again.
    static let alphabet: [Unicode.Scalar] = Array("abcdefghijklmnopqrstuvwxyz ,.-éß中文字😀🎉👍🚀🌍💡🔥✨".unicodeScalars)
    static let markerOpen: Unicode.Scalar = "⟦"
    static let markerClose: Unicode.Scalar = "⟧"

    mutating func int(_ range: ClosedRange<Int>) -> Int { Int.random(in: range, using: &rng) }

    mutating func baseText() -> String {
        var scalars = Self.alphabet
        scalars.shuffle(using: &rng)
        return String(String.UnicodeScalarView(scalars.prefix(int(0...Self.alphabet.count))))
    }

    static func withoutMarkers(_ text: String) -> String {
        var result = String.UnicodeScalarView()
        var inMarker = false
        for scalar in text.unicodeScalars {
            if scalar == markerOpen { inMarker = true } else if scalar == markerClose { inMarker = false } else if !inMarker { result.append(scalar) }
        }
        return String(result)
    }

    struct Script {
        var delta: String
        var text: String
        var markers: [String]
        /// Offsets (in scalars) of the base characters deleted.
        var deleted: Set<Int>
    }

    /// A random edit of `base`: per gap maybe a marker insert, per character maybe a delete
    /// (in runs); written as an exact delta (UTF-16 counts) and as the edited text.
    mutating func script(over base: String, side: String) -> Script {
        let scalars = Array(base.unicodeScalars)
        var tokens: [String] = []
        var text = ""
        var markers: [String] = []
        var deleted: Set<Int> = []
        var deleting = false
        func token(_ operation: String, _ count: Int) {
            if let last = tokens.last, last.hasPrefix(operation), let previous = Int(last.dropFirst()) {
                tokens[tokens.count - 1] = operation + String(previous + count)
            } else {
                tokens.append(operation + String(count))
            }
        }
        for index in 0...scalars.count {
            if int(1...100) <= 25 {
                let marker = "⟦\(side)\(markers.count)⟧"
                markers.append(marker)
                tokens.append("+" + marker)
                text += marker
            }
            guard index < scalars.count else { break }
            deleting = int(1...100) <= (deleting ? 70 : 20)
            let width = scalars[index].utf16.count
            if deleting {
                deleted.insert(index)
                token("-", width)
            } else {
                token("=", width)
                text.unicodeScalars.append(scalars[index])
            }
        }
        return Script(delta: tokens.joined(separator: "\t"), text: text, markers: markers, deleted: deleted)
    }

    struct ListScript {
        var items: [String]
        var inserted: [String]
        var deleted: Set<Int>
    }

    mutating func listScript(over base: [String], side: String) -> ListScript {
        var items: [String] = []
        var inserted: [String] = []
        var deleted: Set<Int> = []
        for index in 0...base.count {
            while int(1...100) <= 30 {
                let item = "⟦\(side)\(inserted.count)⟧"
                inserted.append(item)
                items.append(item)
            }
            guard index < base.count else { break }
            if int(1...100) <= 30 { deleted.insert(index) } else { items.append(base[index]) }
        }
        return ListScript(items: items, inserted: inserted, deleted: deleted)
    }
}
