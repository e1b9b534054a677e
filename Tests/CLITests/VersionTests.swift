import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Testing

/// Issue 41: every way bucketfs says which build it is shows the version from the file VERSION
/// and the commit it was built from.
@Suite("version: --version, version, status --json, the mount's log, serve's startup line, /healthz, the service key", .serialized, .timeLimit(.minutes(Patience.testMinutes)))
struct VersionTests {
    /// The one place the version is written.
    static let version = try! String(
        contentsOfFile: URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("VERSION").path,
        encoding: .utf8
    ).trimmingCharacters(in: .whitespacesAndNewlines)

    /// `bucketfs 0.9.0 (commit 839ed00)`; the commit is `unknown` outside a git checkout.
    static let line = #"^bucketfs (\d+\.\d+\.\d+) \(commit ([0-9a-f]{7,}(-dirty)?|unknown)\)$"#

    @Test func versionFlagAndSubcommandPrintTheVersionAndCommit() throws {
        let cli = try CLIHarness()
        let flag = try cli.bucketfs(["--version"])
        let subcommand = try cli.bucketfs(["version"])
        #expect(flag.status == 0 && subcommand.status == 0, "\(flag.stderr) \(subcommand.stderr)")
        let printed = flag.stdout.trimmingCharacters(in: .newlines)
        #expect(printed.range(of: Self.line, options: .regularExpression) != nil, "unexpected: \(printed)")
        #expect(printed.hasPrefix("bucketfs \(Self.version) "))
        #expect(subcommand.stdout == flag.stdout)
        #expect(try cli.bucketfs(["--help"]).stdout.contains("version"))
    }

    @Test func statusJSONSaysTheVersion() throws {
        let cli = try CLIHarness()
        let printed = try cli.bucketfs(["version"]).stdout
        let status = try cli.bucketfs(["status", "--json"])
        #expect(status.status == 0, "\(status.stderr)")
        let object = try #require(try JSONSerialization.jsonObject(with: Data(status.stdout.utf8)) as? [String: Any])
        #expect(object["version"] as? String == Self.version)
        let commit = try #require(object["commit"] as? String)
        #expect(printed.contains("(commit \(commit))"))
        #expect(object["mounts"] as? [Any] != nil)
    }

    @Test func theMountsLogAndServesAnswersSayTheVersion() async throws {
        let cli = try CLIHarness()
        let printed = try cli.bucketfs(["version"]).stdout.trimmingCharacters(in: .newlines)
        let data = try cli.directory("server")
        let (server, log) = try cli.start(["serve", "--data", data, "--port", "0", "--host", "127.0.0.1", "--apptimist", "notes"])
        defer { cli.stop(server) }
        // Its own line, not Hummingbird's log line "Server started and listening on".
        try eventually { text(of: log).contains("bucketfs server listening on") }
        let startup = try #require(text(of: log).split(separator: "\n").first { $0.hasPrefix("bucketfs server listening on") })
        #expect(startup.hasSuffix(printed), "serve's startup line: \(startup)")
        let port = try #require(startup.firstMatch(of: /127\.0\.0\.1:(\d+)\//).map { String($0.1) })
        func get(_ path: String) async throws -> [String: Any] {
            let (body, _) = try await URLSession.shared.data(from: try #require(URL(string: "http://127.0.0.1:\(port)\(path)")))
            return try #require(try JSONSerialization.jsonObject(with: body) as? [String: Any], "\(path): \(String(decoding: body, as: UTF8.self))")
        }
        #expect(try await get("/healthz")["version"] as? String == printed)
        #expect(try await get("/notes")["server"] as? String == printed)
        let keyDocument = try cli.bucketfs(["apptimist", "service-key", "--data", data, "--service", "notes"])
        #expect(keyDocument.stdout.contains(#""server":"\#(printed)""#), "\(keyDocument.stdout) \(keyDocument.stderr)")

        let mountpoint = try cli.directory("demo")
        let mountLog = cli.path("mount.log")
        let mounted = try cli.bucketfs(["mount", mountpoint, "--log-file", mountLog])
        #expect(mounted.status == 0, "\(mounted.stderr)")
        let first = text(of: URL(fileURLWithPath: mountLog)).split(separator: "\n").first.map(String.init) ?? ""
        #expect(first.contains("\(printed) mounting at \(mountpoint)"), "the log's first line: \(first)")
        let unmounted = try cli.bucketfs(["unmount", mountpoint])
        #expect(unmounted.status == 0, "\(unmounted.stderr)")
    }
}
