import JSONDiff
import PropertyBased
import Testing

struct PropertyTests {
    @Test func applyingADiffGivesTheTarget() async {
        await propertyCheck(count: 300, input: Gen.json) { random throws in
            var random = random
            let a = random.document()
            let b = random.chance(50) ? random.edit(a, depth: 3) : random.document()
            for policy in [nil, RandomJSON.policy] {
                let diff = JSONDiffing.diff(from: a, to: b, policy: policy)
                #expect(throws: Never.self) {
                    let result = try JSONDiffing.apply(diff, to: a)
                    #expect(result == b, "a: \(JSONValue.object(a).compactRendered()) b: \(JSONValue.object(b).compactRendered())")
                }
                #expect((a == b) == diff.isEmpty)
            }
        }
    }

    @Test func transformedConcurrentEditsApplyAndKeepDisjointEdits() async {
        await propertyCheck(count: 300, input: Gen.json) { random throws in
            var random = random
            let s = random.document()
            let a = random.edit(s, depth: 3)
            let b = random.edit(s, depth: 3)
            for policy in [nil, RandomJSON.policy] {
                let local = JSONDiffing.diff(from: s, to: a, policy: policy)
                let remote = JSONDiffing.diff(from: s, to: b, policy: policy)
                let context = "s: \(JSONValue.object(s).compactRendered()) a: \(JSONValue.object(a).compactRendered()) b: \(JSONValue.object(b).compactRendered())"
                #expect(throws: Never.self, "\(context)") {
                    let rebased = try JSONDiffing.transform(local, over: remote, base: s, policy: policy)
                    let merged = try JSONDiffing.apply(rebased, to: JSONDiffing.apply(remote, to: s))
                    for key in Set(local.keys).symmetricDifference(remote.keys) {
                        let expected = local[key] != nil ? a[key] : b[key]
                        #expect(merged[key] == expected, "key \(key); \(context)")
                    }
                    for key in Set(s.keys).union(a.keys).union(b.keys) where local[key] == nil && remote[key] == nil {
                        #expect(merged[key] == s[key], "untouched key \(key); \(context)")
                    }
                    // Where only local changed nothing remotely, the result is exactly the local document.
                    if remote.isEmpty { #expect(merged == a, "\(context)") }
                    if local.isEmpty { #expect(merged == b, "\(context)") }
                }
            }
        }
    }

    @Test func diffsSurviveTheWireFormat() async {
        await propertyCheck(count: 300, input: Gen.json) { random throws in
            var random = random
            let a = random.document()
            let b = random.edit(a, depth: 3)
            let diff = JSONDiffing.diff(from: a, to: b, policy: RandomJSON.policy)
            #expect(try JSONDiffing.decode(JSONDiffing.encode(diff)) == diff)
            let wire = JSONDiffing.encode(diff).compactRendered()
            #expect(try JSONDiffing.decode(JSONValue(parsing: wire)) == diff)
        }
    }

    /// An object's compact text made member by member from its text (no object built) is the
    /// text the parsed object renders to, whatever the text's layout and its duplicate keys; and
    /// what is not one JSON object gives none.
    @Test func anObjectsCompactTextMadeMemberByMemberIsTheParsedObjectsText() async {
        await propertyCheck(count: 300, input: Gen.json) { random throws in
            var random = random
            let value = random.document()
            let pretty = JSONValue.object(value).prettyRenderedBytes()
            let made = JSONValue.compactObjectText(parsing: pretty)
            #expect(made?.text == JSONValue.object(value).compactRendered() && made?.members == value.count)
            // Members again, in another order, with other values, before the document's own:
            // the last of each key counts, as in a parse.
            let compact = Array(JSONValue.object(value).compactRendered().utf8)
            let other = random.document()
            guard compact.count > 2 else { return }
            var doubled = Array(JSONValue.object(other).compactRendered().utf8.dropLast())
            if doubled.count > 1 { doubled.append(UInt8(ascii: ",")) }
            doubled += compact.dropFirst()
            let parsed = try JSONValue(parsing: doubled)
            #expect(JSONValue.compactObjectText(parsing: doubled)?.text == parsed.compactRendered())
        }
        let awkward = #" { "b" : [1, {"z": 1, "a": "x\u0041"}], "a\n\"": 1e2, "é": "\u00e9", "e\u0301": -0.5, "b": null, "": {} } "#
        let parsed = try? JSONValue(parsing: awkward)
        #expect(JSONValue.compactObjectText(parsing: Array(awkward.utf8))?.text == parsed?.compactRendered())
        #expect(JSONValue.compactObjectText(parsing: Array(awkward.utf8))?.members == 5)
        #expect(JSONValue.compactObjectText(parsing: Array("{}".utf8))?.text == "{}")
        for text in ["", "[]", "1", "{", #"{"a":1"#, #"{"a":1} x"#, #"{"a" 1}"#, #"{"a":1,}"#, #"{"\uD800":1}"#, "{\"a\":\"\u{1}\"}"] {
            #expect(JSONValue.compactObjectText(parsing: Array(text.utf8)) == nil, "\(text)")
        }
    }

    /// The creation diff's text written from the value's compact text is the text of the diff
    /// made and encoded, and of the length reserved for it.
    @Test func aCreationDiffsTextIsTheEncodedDiffsText() async {
        func creationDiff(_ object: JSONObject) -> String? {
            JSONValue.compactCreationDiff(ofCompactText: JSONValue.object(object).compactRendered())
        }
        await propertyCheck(count: 300, input: Gen.json) { random throws in
            var random = random
            let value = random.document()
            let made = JSONDiffing.encode(JSONDiffing.diff(from: [:], to: value)).compactRendered()
            let written = creationDiff(value)
            #expect(written == made)
            #expect(written?.utf8.count == JSONValue.object(value).compactRendered().utf8.count + 14 * value.count)
        }
        // Past the size from which members are sorted by their keys' bytes; keys and values that
        // hold quotes, escapes and brackets.
        let large = Dictionary(uniqueKeysWithValues: (0..<500).map { (JSONKey("k\($0 * 7919 % 500)é"), JSONValue.integer(Int64($0))) })
        #expect(creationDiff(large) == JSONDiffing.encode(JSONDiffing.diff(from: [:], to: large)).compactRendered())
        let awkward: JSONObject = [
            "q\"}": .string("a\\\"]},{"), "": .array([.object(["x": .array([])]), .string("[")]), "n": .null, "f": .double(-1.5e3),
            "o": .object([:]),
        ]
        #expect(creationDiff(awkward) == JSONDiffing.encode(JSONDiffing.diff(from: [:], to: awkward)).compactRendered())
        #expect(creationDiff([:]) == "{}")
        // Not a compact object: nil, never a wrong diff.
        for text in ["", "{", "[]", "{ \"a\":1}", #"{"a":1"#, #"{"a":1,}"#, #"{"a"}"#, #"{"a":"x}"#] {
            #expect(JSONValue.compactCreationDiff(ofCompactText: text) == nil, "\(text)")
        }
    }

    @Test func renderedJSONParsesBackToTheSameValue() async {
        await propertyCheck(count: 300, input: Gen.json) { random throws in
            var random = random
            let value = JSONValue.object(random.document())
            #expect(try JSONValue(parsing: value.compactRendered()) == value)
            #expect(try JSONValue(parsing: value.prettyRendered()) == value)
            #expect(try JSONValue(parsing: Array(value.prettyRendered().utf8)) == value)
            let both = value.compactAndPrettyRendered()
            #expect(both.compact == value.compactRendered())
            #expect(both.pretty == Array(value.prettyRendered().utf8))
        }
    }
}

/// Guards the generators: the random edits must reach every kind of operation and conflict.
struct RandomCoverageTests {
    @Test func randomEditsExerciseEveryOperationAndConflict() throws {
        var random = RandomJSON(rng: SeededRNG(base: Xoshiro(seed: (1, 2, 3, 4))))
        var seen: Set<String> = []
        var conflicts = 0
        func collect(_ operation: DiffOp) {
            seen.insert(operation.code)
            switch operation {
            case .object(let diff): diff.values.forEach(collect)
            case .list(let diff): diff.values.forEach(collect)
            default: break
            }
        }
        for _ in 0..<400 {
            let s = random.document()
            let a = random.edit(s, depth: 3)
            let b = random.edit(s, depth: 3)
            let local = JSONDiffing.diff(from: s, to: a, policy: RandomJSON.policy)
            let remote = JSONDiffing.diff(from: s, to: b, policy: RandomJSON.policy)
            local.values.forEach(collect)
            conflicts += Set(local.keys).intersection(remote.keys).count
            _ = try JSONDiffing.apply(JSONDiffing.transform(local, over: remote, base: s, policy: RandomJSON.policy),
                                      to: JSONDiffing.apply(remote, to: s))
        }
        #expect(seen == ["+", "-", "r", "I", "O", "L", "d", "dL"])
        #expect(conflicts > 200)
    }
}
