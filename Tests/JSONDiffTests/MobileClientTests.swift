import JSONDiff
import Testing

/// What Simperium's iOS and Android clients write and expect (issue 20): bucketfs applies what
/// they send, writes the reference's forms itself, and never rewrites text silently.
struct MobileClientTests {
    func apply(_ diff: ObjectDiff, _ object: JSONObject) -> Result<JSONObject, JSONDiffError> {
        Result { () throws(JSONDiffError) in try JSONDiffing.apply(diff, to: object) }
    }

    func reason(_ result: Result<JSONObject, JSONDiffError>) -> String? {
        guard case .failure(.deltaDoesNotFit(_, let reason)) = result else { return nil }
        return reason
    }

    // MARK: dL in iOS's form (items joined by newlines, none after the last)

    @Test(arguments: [
        // iOS's own delta for ["a"] -> ["a", 1] (the case).
        (["a"], "-3\t+%22a%22%0A1", ["a", 1]),
        (["a", 1], "=3\t-2", ["a"]),             // iOS text "a"\n1 is 5 units
        (["a"], "-3", []),
        (["a", 1], "-4\t=1", [1]),
        (["a", 1], "=4\t+%22b%22%0A\t=1", ["a", "b", 1]),
        (["o", "x"], "=4\t+%22o%22%0A\t=3", ["o", "o", "x"]),
    ] as [(JSONValue, String, JSONValue)])
    func iOSListDeltasApply(before: JSONValue, delta: String, after: JSONValue) throws {
        #expect(try apply(["l": .listDelta(delta)], ["l": before]).get() == ["l": after])
    }

    @Test func referenceListDeltasStillApplyAndAreWhatBucketfsWrites() throws {
        #expect(try apply(["l": .listDelta("=4\t+1%0A")], ["l": ["a"]]).get() == ["l": ["a", 1]])
        let policy = try DiffPolicy(json: ["l": ["otype": "list_dmp"]])
        #expect(JSONDiffing.diff(from: ["l": ["a"]], to: ["l": ["a", 1]], policy: policy) == ["l": .listDelta("=4\t+1%0A")])
        // The empty list has one text in both forms.
        #expect(try apply(["l": .listDelta("+%22a%22")], ["l": []]).get() == ["l": ["a"]])
    }

    @Test func listDeltasOfNeitherLengthAreStillRefused() {
        #expect(reason(apply(["l": .listDelta("=2")], ["l": ["a"]])) != nil)
        #expect(reason(apply(["l": .listDelta("=5")], ["l": ["a"]])) != nil)
    }

    @Test func anIOSListDeltaRebasesOverAReferenceOne() throws {
        // Base ["a"]: the local (reference form) appends "3", the remote (iOS form) removes "a".
        let local: ObjectDiff = ["l": .listDelta("=4\t+%223%22%0A")]
        let remote: ObjectDiff = ["l": .listDelta("-3")]
        let rebased = try JSONDiffing.transform(local, over: remote, base: ["l": ["a"]])
        let afterRemote = try JSONDiffing.apply(remote, to: ["l": ["a"]])
        #expect(try JSONDiffing.apply(rebased, to: afterRemote) == ["l": ["3"]])
        // Both appending, the local one in iOS's form: both items are kept.
        let iOSLocal: ObjectDiff = ["l": .listDelta("=3\t+%0A%22b%22")]
        let referenceRemote: ObjectDiff = ["l": .listDelta("=4\t+%22c%22%0A")]
        let both = try JSONDiffing.transform(iOSLocal, over: referenceRemote, base: ["l": ["a"]])
        let merged = try JSONDiffing.apply(both, to: JSONDiffing.apply(referenceRemote, to: ["l": ["a"]]))
        #expect(merged == ["l": ["a", "c", "b"]] || merged == ["l": ["a", "b", "c"]])
    }

    // MARK: d deltas that split a surrogate pair

    @Test(arguments: [
        ("☺️🖖🏿", "=3\t+(null)\t=3"),  // iOS's case: =3 ends inside 🖖
        ("🖖", "=1\t-1"),
        ("🖖", "=1\t+x\t=1"),
        ("ab", "=1\t+x%uD800y\t=1"),     // half a pair from a %u escape
    ])
    func deltasThatCutACharacterAreRefused(text: String, delta: String) throws {
        let result = apply(["s": .stringDelta(delta)], ["s": .string(text)])
        let why = try #require(reason(result), "\(result)")
        #expect(why.contains("splits a character"))
    }

    @Test func deltasThatCutAPairButKeepWholeCharactersApply() throws {
        #expect(try apply(["s": .stringDelta("=1\t-2\t=1")], ["s": "🖖🖖"]).get() == ["s": "🖖"])
        #expect(try apply(["s": .stringDelta("=1\t-1\t+%uD83D\t=2")], ["s": "a🙂b"]).get() == ["s": "a🙂b"])
        #expect(try apply(["s": .stringDelta("=2\t+(null)\t=4")], ["s": "☺️🖖🏿"]).get() == ["s": "☺️(null)🖖🏿"])
    }

    // MARK: + on a key that exists

    @Test func insertOnAnExistingKeyReplaces() throws {
        #expect(try apply(["a": .insert(2)], ["a": 1]).get() == ["a": 2])
        let wire = try JSONDiffing.decode(["body": ["o": "+", "v": "new"]])
        #expect(try JSONDiffing.apply(wire, to: ["body": "old", "t": 1]) == ["body": "new", "t": 1])
        #expect(try apply(["o": .object(["k": .insert([1])])], ["o": ["k": "x"]]).get() == ["o": ["k": [1]]])
    }
}
