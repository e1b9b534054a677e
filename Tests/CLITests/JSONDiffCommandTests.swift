import Foundation
import Testing

/// `bucketfs jsondiff` on what issues 13 and 20 found: refusals say why (exit 1, the reason on
/// standard error), never exit 0 with the text silently changed.
struct JSONDiffCommandTests {
    func write(_ cli: CLIHarness, _ name: String, _ text: String) throws -> String {
        let path = cli.path(name)
        try Data(text.utf8).write(to: URL(fileURLWithPath: path))
        return path
    }

    @Test func aDeltaSplittingACharacterIsRefused() throws {
        let cli = try CLIHarness()
        let value = try write(cli, "v.json", #"{"s": "☺️🖖🏿"}"#)
        let diff = try write(cli, "d.json", #"{"s": {"o": "d", "v": "=3\t+(null)\t=3"}}"#)
        let result = try cli.bucketfs(["jsondiff", "apply", value, diff])
        #expect(result.status == 1)
        #expect(result.stdout.isEmpty)
        #expect(result.stderr.contains("/s: delta does not fit: delta splits a character"), "\(result.stderr)")
    }

    @Test func iOSListDeltasAndInsertOnAnExistingKeyApply() throws {
        let cli = try CLIHarness()
        let value = try write(cli, "v.json", #"{"tags": ["a"], "b": "old"}"#)
        let diff = try write(cli, "d.json", #"{"tags": {"o": "dL", "v": "-3\t+%22a%22%0A1"}, "b": {"o": "+", "v": "new"}}"#)
        let result = try cli.bucketfs(["jsondiff", "apply", value, diff])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout == "{\n  \"b\": \"new\",\n  \"tags\": [\n    \"a\",\n    1\n  ]\n}\n")
    }

    @Test func keysInTwoUnicodeFormsAreTwoKeys() throws {
        let cli = try CLIHarness()
        let a = try write(cli, "a.json", #"{"caf\u00e9": 1}"#)
        let b = try write(cli, "b.json", #"{"cafe\u0301": 1}"#)
        let diff = try cli.bucketfs(["jsondiff", "diff", a, b])
        #expect(diff.status == 0, "\(diff.stderr)")
        #expect(diff.stdout != "{}\n")
        let diffPath = try write(cli, "d.json", diff.stdout)
        let applied = try cli.bucketfs(["jsondiff", "apply", a, diffPath])
        #expect(applied.status == 0, "\(applied.stderr)")
        #expect(applied.stdout == "{\n  \"cafe\u{301}\": 1\n}\n")
    }

    @Test func aLoneSurrogateIsRefused() throws {
        let cli = try CLIHarness()
        let a = try write(cli, "a.json", #"{"k": "a"}"#)
        let b = try write(cli, "b.json", #"{"k": "a\ud800b"}"#)
        let result = try cli.bucketfs(["jsondiff", "diff", a, b])
        #expect(result.status == 1)
        #expect(result.stderr.contains("b.json: line 1, column 9: expected a whole character, not the lone UTF-16 surrogate \\uD800"), "\(result.stderr)")
    }
}
