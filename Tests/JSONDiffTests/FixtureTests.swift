import Foundation
import JSONDiff
import Testing

/// The reference implementation's 29 conformance cases, read from the shared fixture file where it
/// stands (../shared/fixtures next to the package root, or $BUCKETFS_SHARED_DIR/fixtures).
///
/// None of the 29 cases depends on a reference bug: they only compare diffs and merged results.
/// The reference's bugs (JS transform returns after the first key; JS wraps a rebased `L` in `O`;
/// keys of list diffs sorted as strings) are asserted corrected in TransformTests and DiffApplyTests.
struct FixtureTests {
    static func fixtureCandidates() -> [String] {
        var candidates: [String] = []
        if let shared = ProcessInfo.processInfo.environment["BUCKETFS_SHARED_DIR"], !shared.isEmpty {
            candidates.append(shared + "/fixtures/jsondiff-assertions.json")
        }
        // #filePath may go through the dev package's symlinks; the real file is in <root>/Tests/JSONDiffTests.
        let packageRoot = URL(fileURLWithPath: #filePath).resolvingSymlinksInPath()
            .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        candidates.append(packageRoot.appendingPathComponent("../shared/fixtures/jsondiff-assertions.json").standardizedFileURL.path)
        return candidates
    }

    static func loadCases() throws -> [JSONValue] {
        let candidates = fixtureCandidates()
        guard let path = candidates.first(where: { FileManager.default.fileExists(atPath: $0) }),
              let data = FileManager.default.contents(atPath: path) else {
            Issue.record("jsondiff fixture file not found; looked at: \(candidates.joined(separator: ", "))")
            return []
        }
        guard case .array(let cases) = try JSONValue(parsing: [UInt8](data)) else {
            Issue.record("\(path) is not a JSON array")
            return []
        }
        return cases
    }

    struct Case {
        let kind: String
        let name: String
        let arguments: [JSONValue]
        let expected: JSONValue
    }

    static func parse(_ value: JSONValue) -> Case? {
        guard case .array(let parts) = value, parts.count == 4,
              let kind = parts[0].stringValue, let name = parts[1].stringValue,
              let arguments = parts[2].arrayValue else { return nil }
        return Case(kind: kind, name: name, arguments: arguments, expected: parts[3])
    }

    static func policy(_ arguments: [JSONValue], at index: Int) throws -> DiffPolicy? {
        guard arguments.count > index else { return nil }
        return try DiffPolicy(json: arguments[index])
    }

    @Test func allTwentyNineReferenceCasesPass() throws {
        let cases = try Self.loadCases()
        #expect(cases.count == 29)
        var kinds: [String: Int] = [:]
        for raw in cases {
            let fixture = try #require(Self.parse(raw), "malformed fixture case \(raw.compactRendered())")
            kinds[fixture.kind, default: 0] += 1
            switch fixture.kind {
            case "diff": try checkDiff(fixture)
            case "transform": try checkTransform(fixture)
            case "apply_offsets": try checkApplyOffsets(fixture)
            default: Issue.record("unknown fixture kind \(fixture.kind)")
            }
        }
        #expect(kinds == ["diff": 18, "transform": 10, "apply_offsets": 1])
        // The orientation (a local, b remote) is the only one that fits every case.
        var swappedMismatches: [String] = []
        for fixture in cases.compactMap(Self.parse) where fixture.kind == "transform" {
            if try transformResult(fixture, swapped: true) != fixture.expected { swappedMismatches.append(fixture.name) }
        }
        #expect(swappedMismatches.contains("list, transform"))
    }

    /// ["diff", name, [a, b, policy?], {"o": "O", "v": diff}]: our diff renders exactly the
    /// reference's, and applying the reference's diff to a gives b (the reference's generated
    /// apply tests).
    func checkDiff(_ fixture: Case) throws {
        let a = try #require(fixture.arguments.first?.objectValue, "\(fixture.name)")
        let b = try #require(fixture.arguments.dropFirst().first?.objectValue, "\(fixture.name)")
        let policy = try Self.policy(fixture.arguments, at: 2)
        let expectedDiff = try #require(fixture.expected["v"], "\(fixture.name)")
        #expect(fixture.expected["o"] == "O", "\(fixture.name)")

        let diff = JSONDiffing.diff(from: a, to: b, policy: policy)
        #expect(JSONDiffing.encode(diff) == expectedDiff, "diff: \(fixture.name): got \(JSONDiffing.encode(diff).compactRendered())")
        #expect(try JSONDiffing.decode(expectedDiff) == diff, "decode: \(fixture.name)")
        #expect(try JSONDiffing.apply(JSONDiffing.decode(expectedDiff), to: a) == b, "apply: \(fixture.name)")
    }

    /// ["transform", name, [s, a, b, policy?], result]: a is the local edit, b the remote one
    /// (as in the reference's test harness): result == apply(apply(s, diff(s, b)), transform(diff(s, a), diff(s, b), s)).
    /// Checked against all cases; the other orientation fails e.g. "list, transform" ([1,2,3,4,5]).
    func checkTransform(_ fixture: Case) throws {
        let result = try transformResult(fixture, swapped: false)
        #expect(result == fixture.expected, "transform: \(fixture.name): got \(result.compactRendered())")
    }

    func transformResult(_ fixture: Case, swapped: Bool) throws -> JSONValue {
        let s = try #require(fixture.arguments.first?.objectValue, "\(fixture.name)")
        var a = try #require(fixture.arguments.dropFirst().first?.objectValue, "\(fixture.name)")
        var b = try #require(fixture.arguments.dropFirst(2).first?.objectValue, "\(fixture.name)")
        if swapped { swap(&a, &b) }
        let policy = try Self.policy(fixture.arguments, at: 3)
        let local = JSONDiffing.diff(from: s, to: a, policy: policy)
        let remote = JSONDiffing.diff(from: s, to: b, policy: policy)
        let rebased = try JSONDiffing.transform(local, over: remote, base: s, policy: policy)
        return .object(try JSONDiffing.apply(rebased, to: JSONDiffing.apply(remote, to: s)))
    }

    /// ["apply_offsets", name, [a, b], result]: the reference applies the string delta with its
    /// cursor-keeping patch_apply_with_offsets; the text result is what the wire cares about.
    func checkApplyOffsets(_ fixture: Case) throws {
        let a = try #require(fixture.arguments.first?.objectValue, "\(fixture.name)")
        let b = try #require(fixture.arguments.dropFirst().first?.objectValue, "\(fixture.name)")
        let diff = JSONDiffing.diff(from: a, to: b)
        #expect(.object(try JSONDiffing.apply(diff, to: a)) == fixture.expected, "apply_offsets: \(fixture.name)")
    }
}
