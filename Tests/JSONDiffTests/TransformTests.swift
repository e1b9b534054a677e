import JSONDiff
import Testing

/// Rebasing a local edit over a concurrent remote edit of the same base.
struct TransformTests {
    /// apply(apply(s, remote), transform(local, remote, s)) for local edit a and remote edit b.
    func merge(_ s: JSONObject, local a: JSONObject, remote b: JSONObject, policy: DiffPolicy? = nil) throws -> JSONObject {
        let local = JSONDiffing.diff(from: s, to: a, policy: policy)
        let remote = JSONDiffing.diff(from: s, to: b, policy: policy)
        let rebased = try JSONDiffing.transform(local, over: remote, base: s, policy: policy)
        return try JSONDiffing.apply(rebased, to: JSONDiffing.apply(remote, to: s))
    }

    @Test func everyKeyIsRebasedNotOnlyTheFirst() throws {
        // The reference JS returns from inside its key loop; each of these keys needs rebasing.
        let s: JSONObject = ["a": "one two", "b": "three four", "c": "five six", "d": 1]
        let a: JSONObject = ["a": "One two", "b": "Three four", "c": "Five six", "d": 1]
        let b: JSONObject = ["a": "one two!", "b": "three four!", "c": "five six!", "d": 2]
        #expect(try merge(s, local: a, remote: b) == ["a": "One two!", "b": "Three four!", "c": "Five six!", "d": 2])
    }

    @Test func editsOfDifferentKeysAreBothKept() throws {
        let s: JSONObject = ["a": 1, "b": "x", "c": ["d": true]]
        #expect(try merge(s, local: ["a": 2, "b": "x", "c": ["d": true]], remote: ["a": 1, "b": "x", "c": ["d": false], "e": 3])
                == ["a": 2, "b": "x", "c": ["d": false], "e": 3])
    }

    @Test func bothAddingTheSameKey() throws {
        #expect(try JSONDiffing.transform(["k": .insert(1)], over: ["k": .insert(1)], base: [:]).isEmpty)
        // Different values: local wins, expressed as an edit of the remote value.
        #expect(try JSONDiffing.transform(["k": .insert("abc")], over: ["k": .insert("abd")], base: [:]) == ["k": .stringDelta("=2\t-1\t+c")])
        #expect(try merge([:], local: ["k": ["x": 1]], remote: ["k": ["y": 2]]) == ["k": ["x": 1]])
    }

    @Test func bothRemovingAKey() throws {
        #expect(try JSONDiffing.transform(["k": .remove], over: ["k": .remove], base: ["k": 1]).isEmpty)
    }

    @Test func localRemovalWinsOverARemoteEdit() throws {
        #expect(try merge(["k": "text", "j": 1], local: ["j": 1], remote: ["k": "texts", "j": 1]) == ["j": 1])
    }

    @Test func aLocalEditOfARemotelyRemovedKeyAddsItBack() throws {
        let counter = try DiffPolicy(json: ["n": ["otype": "integer"]])
        #expect(try merge(["k": "text"], local: ["k": "next"], remote: [:]) == ["k": "next"])
        #expect(try merge(["k": ["a": 1, "b": 2]], local: ["k": ["a": 1, "b": 3]], remote: [:]) == ["k": ["a": 1, "b": 3]])
        #expect(try merge(["n": 5], local: ["n": 7], remote: [:], policy: counter) == ["n": 7])
        #expect(try merge(["k": 1], local: ["k": 2], remote: [:]) == ["k": 2])
        #expect(try JSONDiffing.transform(["n": .increment(2)], over: ["n": .remove], base: ["n": 5]) == ["n": .insert(7)])
    }

    @Test func concurrentTextEditsMerge() throws {
        #expect(try merge(["t": "hello world"], local: ["t": "Hello world"], remote: ["t": "hello world!"]) == ["t": "Hello world!"])
        #expect(try merge(["t": "😀 a b c"], local: ["t": "😀 A b c"], remote: ["t": "😀 a b C 🎉"]) == ["t": "😀 A b C 🎉"])
    }

    @Test func incrementsAddUp() throws {
        let counter = try DiffPolicy(json: ["n": ["otype": "integer"]])
        #expect(try merge(["n": 5], local: ["n": 7], remote: ["n": 8], policy: counter) == ["n": 10])
        // A remote replacement keeps counting the local increment on top.
        #expect(try JSONDiffing.transform(["n": .increment(2)], over: ["n": .replace(100)], base: ["n": 5]) == ["n": .increment(2)])
    }

    @Test func localReplaceWinsAndTextEditsFollowARemoteReplace() throws {
        #expect(try merge(["k": 1], local: ["k": 2], remote: ["k": 3]) == ["k": 2])
        let rebased = try JSONDiffing.transform(["t": .stringDelta("=5\t+!")], over: ["t": .replace("hello there")], base: ["t": "hello"])
        // The local patch's context is the end of the text, so its "!" lands at the new end.
        #expect(rebased == ["t": .stringDelta("=11\t+!")])
    }

    @Test func nestedObjectsRecurse() throws {
        let s: JSONObject = ["o": ["a": "x", "b": 1, "c": ["d": "deep"]]]
        let a: JSONObject = ["o": ["a": "xy", "b": 1, "c": ["d": "deep!"]]]
        let b: JSONObject = ["o": ["a": "zx", "b": 2, "c": ["d": "Deep"]]]
        #expect(try merge(s, local: a, remote: b) == ["o": ["a": "zxy", "b": 2, "c": ["d": "Deep!"]]])
    }

    @Test func listsShiftAroundRemoteInsertionsAndRemovals() throws {
        let policy = try DiffPolicy(json: ["l": ["otype": "list", "item": ["otype": "integer"]]])
        let s: JSONObject = ["l": [10, 20, 30, 40]]
        // Remote inserts at the front and removes 20; local increments 30 and appends.
        let merged = try merge(s, local: ["l": [10, 20, 31, 40, 50]], remote: ["l": [0, 10, 30, 40]], policy: policy)
        #expect(merged == ["l": [0, 10, 31, 40, 50]])
        // Both remove the same item; local also removes another.
        #expect(try merge(s, local: ["l": [10, 40]], remote: ["l": [10, 30, 40]], policy: policy) == ["l": [10, 40]])
        // Both increment the same item: increments add up.
        #expect(try merge(s, local: ["l": [10, 25, 30, 40]], remote: ["l": [10, 27, 30, 40]], policy: policy) == ["l": [10, 32, 30, 40]])
        // Local edit of an item removed remotely: the edited item comes back in its place.
        #expect(try merge(s, local: ["l": [10, 20, 33, 40]], remote: ["l": [10, 20, 40]], policy: policy) == ["l": [10, 20, 33, 40]])
    }

    @Test func listTransformStaysAList() throws {
        // The reference JS wraps a rebased L in 'O'; ours stays 'L'.
        let rebased = try JSONDiffing.transform(["l": .list([0: .replace(1)])], over: ["l": .list([0: .insert(0)])],
                                                base: ["l": [5]])
        #expect(rebased == ["l": .list([1: .replace(1)])])
    }

    @Test func listTextEditsMerge() throws {
        let policy = try DiffPolicy(json: ["l": ["otype": "list_dmp"]])
        let s: JSONObject = ["l": ["a", "b", "c", "d"]]
        #expect(try merge(s, local: ["l": ["a", "x", "b", "c", "d"]], remote: ["l": ["a", "b", "c", "d", "e"]], policy: policy)
                == ["l": ["a", "x", "b", "c", "d", "e"]])
    }

    @Test func mismatchedBasesAreTypedErrors() throws {
        #expect(throws: JSONDiffError.self) {
            try JSONDiffing.transform(["t": .stringDelta("=1")], over: ["t": .stringDelta("=1")], base: ["t": 1])
        }
        #expect(throws: JSONDiffError.self) {
            try JSONDiffing.transform(["t": .stringDelta("=9")], over: ["t": .stringDelta("=1")], base: ["t": "a"])
        }
        #expect(throws: JSONDiffError.self) {
            try JSONDiffing.transform(["l": .list([5: .remove])], over: ["l": .list([0: .remove])], base: ["l": [1]])
        }
        #expect(throws: JSONDiffError.self) {
            try JSONDiffing.transform(["k": .object([:])], over: ["k": .remove], base: [:])
        }
    }
}
