import JSONDiff
import Testing

/// Object keys are distinct by their code points (issue 13): Swift's String `==` would make
/// "caf\u{E9}" and "cafe\u{301}" one key.
struct UnicodeKeyTests {
    static let pairs: [(String, String)] = [("caf\u{E9}", "cafe\u{301}"), ("\u{C5}", "\u{212B}"), ("\u{E9}", "e\u{301}")]

    @Test func canonicallyEquivalentKeysParseAsTwoKeys() throws {
        let value = try JSONValue(parsing: #"{"\u00e9":1,"e\u0301":2}"#)
        let object = try #require(value.objectValue)
        #expect(object.count == 2)
        #expect(object[JSONKey("\u{E9}")] == 1)
        #expect(object[JSONKey("e\u{301}")] == 2)
        #expect(value.compactRendered() == "{\"e\u{301}\":2,\"\u{E9}\":1}")
    }

    /// As `bucketfs jsondiff` sees it: JSON text in, JSON text out.
    @Test func aRenameBetweenEquivalentKeysIsNotAnEmptyDiff() throws {
        let before = try #require(JSONValue(parsing: #"{"caf\u00e9": "v"}"#).objectValue)
        let after = try #require(JSONValue(parsing: #"{"cafe\u0301": "v"}"#).objectValue)
        let diff = JSONDiffing.encode(JSONDiffing.diff(from: before, to: after))
        #expect(diff.compactRendered() == "{\"cafe\u{301}\":{\"o\":\"+\",\"v\":\"v\"},\"caf\u{E9}\":{\"o\":\"-\"}}")
        let applied = try JSONDiffing.apply(JSONDiffing.decode(diff), to: before)
        #expect(JSONValue.object(applied).compactRendered() == "{\"cafe\u{301}\":\"v\"}")
    }

    @Test(arguments: pairs)
    func keysOfEquivalentTextAreDifferentKeys(a: String, b: String) throws {
        #expect(JSONKey(a) != JSONKey(b))
        #expect(Set([JSONKey(a), JSONKey(b)]).count == 2)
        let before: JSONObject = [JSONKey(a): 1]
        let after: JSONObject = [JSONKey(b): 1]
        #expect(JSONValue.object(before) != JSONValue.object(after))
        #expect(Set([JSONValue.object(before), JSONValue.object(after)]).count == 2)
    }

    @Test(arguments: pairs)
    func aRenameBetweenEquivalentKeysDiffsAndApplies(a: String, b: String) throws {
        let before: JSONObject = [JSONKey(a): "v", "other": 1]
        let after: JSONObject = [JSONKey(b): "v", "other": 1]
        let diff = JSONDiffing.diff(from: before, to: after)
        #expect(diff == [JSONKey(a): .remove, JSONKey(b): .insert("v")])
        #expect(try JSONDiffing.apply(diff, to: before) == after)
        // Through the wire form as well.
        let wire = try JSONValue(parsing: JSONDiffing.encode(diff).compactRendered())
        #expect(try JSONDiffing.apply(JSONDiffing.decode(wire), to: before) == after)
        // Rebasing keeps the keys apart too: a remote edit of `a` and a local rename of it.
        let remote: ObjectDiff = [JSONKey(a): .replace("w")]
        let rebased = try JSONDiffing.transform(diff, over: remote, base: before)
        #expect(try JSONDiffing.apply(rebased, to: JSONDiffing.apply(remote, to: before)) == after)
    }

    @Test func sortedKeysFollowCodePoints() throws {
        // Code point order, not Swift's String order (which compares normalized forms).
        let object: JSONObject = ["\u{212B}": 1, "\u{C5}": 2, "e\u{301}": 3, "\u{E9}": 4, "z": 5]
        let expected = "{\"e\u{301}\":3,\"z\":5,\"\u{C5}\":2,\"\u{E9}\":4,\"\u{212B}\":1}"
        #expect(JSONValue.object(object).compactRendered() == expected)
        // The same members inserted in another order render the same bytes.
        var reversed = JSONObject()
        for (key, value) in object.sorted(by: { $0.key > $1.key }) { reversed[key] = value }
        #expect(JSONValue.object(reversed).prettyRendered() == JSONValue.object(object).prettyRendered())
        #expect(object.keys.sorted().map(\.string) == ["e\u{301}", "z", "\u{C5}", "\u{E9}", "\u{212B}"])
    }

    @Test func aPolicyNamesKeysExactly() throws {
        let policy = try DiffPolicy(json: ["caf\u{E9}": ["otype": "replace"]])
        let diff = JSONDiffing.diff(from: ["caf\u{E9}": "ab", "cafe\u{301}": "ab"], to: ["caf\u{E9}": "abc", "cafe\u{301}": "abc"], policy: policy)
        #expect(diff[JSONKey("caf\u{E9}")] == .replace("abc"))
        #expect(diff[JSONKey("cafe\u{301}")] == .stringDelta("=2\t+c"))
    }
}
