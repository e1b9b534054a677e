import JSONDiff
import Testing

/// Diffs that do not fit, from other implementations or corrupted: typed errors, never a crash.
struct ApplyErrorTests {
    func applyError(_ diff: ObjectDiff, _ object: JSONObject) -> JSONDiffError? {
        do {
            _ = try JSONDiffing.apply(diff, to: object)
            return nil
        } catch {
            return error
        }
    }

    func decodeError(_ json: JSONValue) -> JSONDiffError? {
        do {
            _ = try JSONDiffing.decode(json)
            return nil
        } catch {
            return error
        }
    }

    @Test func keysMustFit() {
        #expect(applyError(["a": .remove], [:]) == .missingKey(path: ["a"]))
        #expect(applyError(["a": .replace(1)], [:]) == .missingKey(path: ["a"]))
        #expect(applyError(["a": .object(["b": .remove])], ["a": [:]]) == .missingKey(path: ["a", "b"]))
    }

    @Test func indexesMustFit() {
        #expect(applyError(["l": .list([3: .remove])], ["l": [1, 2]]) == .indexOutOfRange(path: ["l", "3"], index: 3, count: 2))
        #expect(applyError(["l": .list([3: .insert(1)])], ["l": [1, 2]]) == .indexOutOfRange(path: ["l", "3"], index: 3, count: 2))
        #expect(applyError(["l": .list([2: .replace(1)])], ["l": [1, 2]]) == .indexOutOfRange(path: ["l", "2"], index: 2, count: 2))
        #expect(applyError(["l": .list([0: .remove, 1: .remove, 2: .remove])], ["l": [1, 2]]) != nil)
        #expect(applyError(["l": .list([-1: .remove])], ["l": [1]]) != nil)
    }

    @Test func deltasMustCoverTheWholeText() throws {
        let short = try #require(applyError(["s": .stringDelta("=2\t+x")], ["s": "abc"]))
        guard case .deltaDoesNotFit(let path, _) = short else { Issue.record("\(short)"); return }
        #expect(path == ["s"])
        #expect(applyError(["s": .stringDelta("=4")], ["s": "abc"]) != nil)
        #expect(applyError(["s": .stringDelta("=3")], ["s": "abc"]) == nil)
        // The emoji is two UTF-16 units, so =1 does not cover it.
        #expect(applyError(["s": .stringDelta("=1")], ["s": "😀"]) != nil)
        #expect(applyError(["s": .stringDelta("x5")], ["s": "abcde"]) != nil)
        #expect(applyError(["s": .stringDelta("+%ZZ")], ["s": ""]) != nil)
        // [1] is "1\n" (2 units) as the reference writes it, "1" as iOS does: 3 fits neither.
        #expect(applyError(["l": .listDelta("=3")], ["l": [1]]) != nil)
    }

    @Test func listTextMustStayJSON() throws {
        let error = try #require(applyError(["l": .listDelta("=2\t+x")], ["l": [1]]))
        guard case .deltaDoesNotFit(let path, let reason) = error else { Issue.record("\(error)"); return }
        #expect(path == ["l"])
        #expect(reason.contains("not JSON"))
    }

    @Test func operationsMustMatchTheValueType() {
        #expect(applyError(["a": .stringDelta("=1")], ["a": 1]) == .typeMismatch(path: ["a"], operation: "d", found: "integer"))
        #expect(applyError(["a": .object([:])], ["a": "x"]) == .typeMismatch(path: ["a"], operation: "O", found: "string"))
        #expect(applyError(["a": .list([:])], ["a": [:]]) == .typeMismatch(path: ["a"], operation: "L", found: "object"))
        #expect(applyError(["a": .listDelta("")], ["a": nil]) == .typeMismatch(path: ["a"], operation: "dL", found: "null"))
        #expect(applyError(["a": .increment(1)], ["a": "1"]) == .typeMismatch(path: ["a"], operation: "I", found: "string"))
        #expect(applyError(["l": .list([0: .object(["x": .increment(1)])])], ["l": [["x": true]]])
                == .typeMismatch(path: ["l", "0", "x"], operation: "I", found: "boolean"))
    }

    @Test func incrementsMustStayInRange() {
        #expect(applyError(["a": .increment(1)], ["a": .integer(.max)]) == .numberOutOfRange(path: ["a"]))
        #expect(applyError(["a": .increment(1)], ["a": .bigInteger("99999999999999999999")]) == .numberOutOfRange(path: ["a"]))
        #expect(applyError(["a": .increment(1e308)], ["a": 1.7e308]) == .numberOutOfRange(path: ["a"]))
        #expect(applyError(["a": .increment("x")], ["a": 1]) != nil)
    }

    @Test func insertAndRemoveNeedAContainer() {
        #expect(applyError(["a": .object(["b": .list([0: .insert(1)])])], ["a": ["b": []]]) == nil)
    }

    @Test func malformedWireOperations() {
        let cases: [JSONValue] = [
            3, ["a": 1], ["a": ["v": 1]], ["a": ["o": 1]], ["a": ["o": "x", "v": 1]], ["a": ["o": "+"]],
            ["a": ["o": "r"]], ["a": ["o": "I", "v": "1"]], ["a": ["o": "I", "v": .bigInteger("99999999999999999999")]],
            ["a": ["o": "O", "v": 1]], ["a": ["o": "O", "v": ["b": ["o": "?"]]]], ["a": ["o": "L", "v": [1]]],
            ["a": ["o": "L", "v": ["x": ["o": "-"]]]], ["a": ["o": "L", "v": ["01": ["o": "-"]]]],
            ["a": ["o": "L", "v": ["-1": ["o": "-"]]]], ["a": ["o": "d", "v": 1]], ["a": ["o": "dL"]],
        ]
        for json in cases {
            let error = decodeError(json)
            guard case .malformedOperation? = error else {
                Issue.record("\(json.compactRendered()) gave \(String(describing: error))")
                continue
            }
        }
        #expect(decodeError(["a": ["o": "O", "v": ["b": ["o": "?"]]]]) == .malformedOperation(path: ["a", "b"], reason: "unknown operation '?'"))
        #expect(decodeError(["a": ["o": "-", "v": 1]]) == nil)  // a stray v on '-' is harmless
    }

    @Test func errorsDescribeThemselves() {
        #expect(JSONDiffError.missingKey(path: ["a", "0"]).description == "/a/0: key does not exist")
        #expect(JSONDiffError.indexOutOfRange(path: ["l", "3"], index: 3, count: 2).description == "/l/3: index 3 out of range (count 2)")
    }
}
