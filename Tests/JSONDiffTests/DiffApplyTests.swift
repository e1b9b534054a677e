import JSONDiff
import Testing

/// Each operation: what diff makes, its wire form, and that apply reverses it.
struct DiffApplyTests {
    func roundTrip(_ a: JSONObject, _ b: JSONObject, policy: DiffPolicy? = nil) throws -> ObjectDiff {
        let diff = JSONDiffing.diff(from: a, to: b, policy: policy)
        #expect(try JSONDiffing.apply(diff, to: a) == b)
        #expect(try JSONDiffing.decode(JSONDiffing.encode(diff)) == diff)
        return diff
    }

    @Test func equalObjectsGiveAnEmptyDiff() throws {
        #expect(try roundTrip(["a": [1, ["b": "c"]]], ["a": [1, ["b": "c"]]]).isEmpty)
        #expect(JSONDiffing.encode([:]) == .object([:]))
    }

    @Test func insertAndRemove() throws {
        #expect(try roundTrip(["a": 1], ["a": 1, "b": [true]]) == ["b": .insert([true])])
        #expect(try roundTrip(["a": 1, "b": 2], ["a": 1]) == ["b": .remove])
        #expect(JSONDiffing.encode(["b": .remove]) == ["b": ["o": "-"]])
        #expect(JSONDiffing.encode(["b": .insert(nil)]) == ["b": ["o": "+", "v": nil]])
    }

    @Test func replaceIsTheDefaultForNumbersBooleansArraysAndTypeChanges() throws {
        #expect(try roundTrip(["a": 1], ["a": 2]) == ["a": .replace(2)])
        #expect(try roundTrip(["a": true], ["a": false]) == ["a": .replace(false)])
        #expect(try roundTrip(["a": [1, 2]], ["a": [2]]) == ["a": .replace([2])])
        #expect(try roundTrip(["a": "x"], ["a": 7]) == ["a": .replace(7)])
        #expect(try roundTrip(["a": 1], ["a": 1.0]) == ["a": .replace(1.0)])
        #expect(try roundTrip(["a": nil], ["a": ["b": 1]]) == ["a": .replace(["b": 1])])
        #expect(try roundTrip(["a": 1], ["a": 2], policy: DiffPolicy(json: ["a": ["otype": "replace"]])) == ["a": .replace(2)])
        #expect(try roundTrip(["a": ["x": 1]], ["a": ["x": 2]], policy: DiffPolicy(json: ["a": ["otype": "replace"]]))
                == ["a": .replace(["x": 2])])
    }

    @Test func stringsUseDeltasCountedInUTF16() throws {
        #expect(try roundTrip(["a": "b"], ["a": "c"]) == ["a": .stringDelta("-1\t+c")])
        #expect(try roundTrip(["a": "hello"], ["a": "hello world"]) == ["a": .stringDelta("=5\t+ world")])
        // An astral character is two UTF-16 units.
        #expect(try roundTrip(["a": "😀x"], ["a": "😀y"]) == ["a": .stringDelta("=2\t-1\t+y")])
        // Inserted text is encodeURI-escaped, except that spaces stay spaces.
        #expect(try roundTrip(["a": "a b"], ["a": "a%b\n"]) == ["a": .stringDelta("=1\t-2\t+%25b%0A")])
        #expect(try roundTrip(["a": "a"], ["a": "a b/c?é"]) == ["a": .stringDelta("=1\t+ b/c?%C3%A9")])
        _ = try roundTrip(["a": "👨‍👩‍👧 family"], ["a": "👨‍👩‍👦 famille 🎉"])
        _ = try roundTrip(["a": ""], ["a": "é"])
        _ = try roundTrip(["a": "é"], ["a": ""])
    }

    @Test func normalizationOnlyEditsAreChanges() throws {
        let precomposed: JSONObject = ["t": "caf\u{E9}"]
        let decomposed: JSONObject = ["t": "cafe\u{301}"]
        #expect(JSONValue.object(precomposed) != JSONValue.object(decomposed))
        #expect(try roundTrip(precomposed, decomposed) == ["t": .stringDelta("=3\t-1\t+e%CC%81")])
    }

    @Test func nestedObjects() throws {
        let diff = try roundTrip(["a": ["b": ["c": 1, "d": "x"]]], ["a": ["b": ["c": 1, "d": "y", "e": nil]]])
        #expect(diff == ["a": .object(["b": .object(["d": .stringDelta("-1\t+y"), "e": .insert(nil)])])])
        #expect(JSONDiffing.encode(diff) == ["a": ["o": "O", "v": ["b": ["o": "O", "v": [
            "d": ["o": "d", "v": "-1\t+y"], "e": ["o": "+", "v": nil]]]]]])
    }

    @Test func incrementsOnlyWithAnIntegerPolicy() throws {
        let policy = try DiffPolicy(json: ["n": ["otype": "integer"]])
        #expect(try roundTrip(["n": 5], ["n": 2], policy: policy) == ["n": .increment(-3)])
        #expect(try roundTrip(["n": 1.5], ["n": 2.75], policy: policy) == ["n": .increment(1.25)])
        // Not representable as an exact increment: falls back to replace.
        #expect(try roundTrip(["n": .integer(.min)], ["n": .integer(.max)], policy: policy) == ["n": .replace(.integer(.max))])
        #expect(try roundTrip(["n": "x"], ["n": 2], policy: policy) == ["n": .replace(2)])
        #expect(try roundTrip(["n": 0.1], ["n": 0.3], policy: policy).count == 1)
        #expect(try JSONDiffing.apply(["n": .increment(2)], to: ["n": 1.5]) == ["n": 3.5])
    }

    @Test func listsWithAListPolicy() throws {
        let policy = try DiffPolicy(json: ["l": ["otype": "list"]])
        #expect(try roundTrip(["l": [1, 2, 3]], ["l": [1, 2, 3, 4]], policy: policy) == ["l": .list([3: .insert(4)])])
        #expect(try roundTrip(["l": [1, 2, 3, 4]], ["l": [1, 3]], policy: policy) == ["l": .list([1: .remove, 3: .remove])])
        #expect(try roundTrip(["l": [1, 2, 3]], ["l": [0, 1, 9, 3, 4]], policy: policy)
                == ["l": .list([0: .insert(0), 2: .replace(9), 4: .insert(4)])])
        _ = try roundTrip(["l": []], ["l": [1, 2]], policy: policy)
        _ = try roundTrip(["l": [1, 2]], ["l": []], policy: policy)
        _ = try roundTrip(["l": ["a", "b", "c", "d", "e"]], ["l": ["e", "x", "c", "a", "b", "y"]], policy: policy)
        #expect(JSONDiffing.encode(["l": .list([3: .insert(4), 10: .remove])]) == ["l": ["o": "L", "v": ["3": ["o": "+", "v": 4], "10": ["o": "-"]]]])
    }

    @Test func listApplyUsesNumericOrderAndShiftsForRemovals() throws {
        // The reference sorted keys as strings ("10" < "2"); numeric order is the intended one.
        let list: JSONValue = .array((0..<12).map { .integer($0) })
        let diff: ObjectDiff = ["l": .list([2: .remove, 10: .replace(99), 3: .remove])]
        let result = try JSONDiffing.apply(diff, to: ["l": list])
        #expect(result == ["l": [0, 1, 4, 5, 6, 7, 8, 9, 99, 11]])
        // Removal then insertion at the next key lands where the removed item was.
        #expect(try JSONDiffing.apply(["l": .list([1: .remove, 2: .insert("x")])], to: ["l": ["a", "b", "c"]]) == ["l": ["a", "x", "c"]])
        #expect(try JSONDiffing.apply(["l": .list([3: .insert("end")])], to: ["l": ["a", "b", "c"]]) == ["l": ["a", "b", "c", "end"]])
    }

    @Test func listItemsFollowTheItemPolicy() throws {
        let policy = try DiffPolicy(json: ["l": ["otype": "list", "item": ["otype": "integer"]]])
        #expect(try roundTrip(["l": [1, 2]], ["l": [1, 5]], policy: policy) == ["l": .list([1: .increment(3)])])
        let objects = try DiffPolicy(json: ["l": ["otype": "list", "item": ["attributes": ["t": ["otype": "integer"]]]]])
        #expect(try roundTrip(["l": [["t": 1]]], ["l": [["t": 3]]], policy: objects) == ["l": .list([0: .object(["t": .increment(2)])])])
    }

    @Test func listsAsTextWithAListDMPPolicy() throws {
        let policy = try DiffPolicy(json: ["l": ["otype": "list_dmp"]])
        #expect(try roundTrip(["l": [1, 2, 3]], ["l": [1, 2, 3, 4]], policy: policy) == ["l": .listDelta("=6\t+4%0A")])
        #expect(try roundTrip(["l": [["a": "x\ny"], "😀"]], ["l": ["😀", ["a": "x\ny"], nil]], policy: policy).count == 1)
        #expect(try JSONDiffing.apply(["l": .listDelta("=2\t+%7B%22a%22:1%7D%0A")], to: ["l": [1]]) == ["l": [1, ["a": 1]]])
        #expect(JSONDiffing.encode(["l": .listDelta("-2")]) == ["l": ["o": "dL", "v": "-2"]])
    }

    @Test func bigIntegersAndFloatsSurviveDiffAndApply() throws {
        let a: JSONObject = ["big": .bigInteger("18446744073709551617"), "f": 1.0, "p": 9_007_199_254_740_993]
        let b: JSONObject = ["big": .bigInteger("18446744073709551618"), "f": 1.5, "p": 9_007_199_254_740_995]
        let diff = try roundTrip(a, b)
        let wire = JSONDiffing.encode(diff).compactRendered()
        #expect(wire.contains("18446744073709551618"))
        #expect(wire.contains("9007199254740995"))
        #expect(try JSONDiffing.apply(JSONDiffing.decode(JSONValue(parsing: wire)), to: a) == b)
    }

    @Test func policiesReadTheReferenceSchema() throws {
        let policy = try DiffPolicy(json: ["a": ["attributes": ["b": ["otype": "list", "item": ["otype": "integer"]]]]])
        #expect(policy.attributes["a"]?.attributes["b"]?.operationType == .list)
        #expect(policy.attributes["a"]?.attributes["b"]?.item?.operationType == .integer)
        #expect(try DiffPolicy(json: policy.json) == policy)
        #expect(throws: JSONDiffError.self) { try DiffPolicy(json: ["a": ["otype": "bogus"]]) }
        #expect(throws: JSONDiffError.self) { try DiffPolicy(json: 3) }
    }
}
