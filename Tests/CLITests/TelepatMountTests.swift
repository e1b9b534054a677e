import Foundation
import Testing

/// `bucketfs mount --protocol telepat`: the second engine behind the same seam, store and file
/// system. These run without a Telepat server (a port nothing listens on): what the mount does
/// on its own. Against a server: EndToEndTests.
@Suite("Telepat mounts", .serialized, .timeLimit(.minutes(Patience.testMinutes)))
struct TelepatMountTests {
    @Test func telepatOptionsAreCheckedBeforeAnythingStarts() throws {
        let cli = try CLIHarness()
        let mountpoint = try cli.directory("m")
        let base = ["mount", mountpoint, "--protocol", "telepat", "--app-id", "app", "--token", "t", "--bucket", "blog/posts"]
        let noKey = try cli.bucketfs(base + ["--server", "http://127.0.0.1:9"])
        #expect(noKey.status != 0 && noKey.stderr.contains("needs --api-key"), "\(noKey.stderr)")
        let websocket = try cli.bucketfs(base + ["--server", "ws://127.0.0.1:9", "--api-key", "k"])
        #expect(websocket.status != 0 && websocket.stderr.contains("starts with http:// or https://"), "\(websocket.stderr)")
        let noServer = try cli.bucketfs(["mount", mountpoint, "--protocol", "telepat", "--api-key", "k"])
        #expect(noServer.status != 0 && noServer.stderr.contains("needs --server"), "\(noServer.stderr)")
        let history = try cli.bucketfs(base + ["--server", "http://127.0.0.1:9", "--api-key", "k", "--history", "--foreground"])
        #expect(history.status != 0 && history.stderr.contains("keeps none"), "\(history.stderr)")
        let flat = try cli.bucketfs(["mount", mountpoint, "--protocol", "telepat", "--app-id", "app", "--token", "t", "--bucket", "posts",
            "--server", "http://127.0.0.1:9", "--api-key", "k", "--foreground"])
        #expect(flat.status != 0 && flat.stderr.contains("CONTEXT/MODEL"), "\(flat.stderr)")
        #expect(!isMounted(mountpoint))
    }

    @Test func offlineATelepatMountShowsContextAndModelAndKeepsSavesQueued() async throws {
        let cli = try CLIHarness()
        let mountpoint = try cli.directory("tp")
        let store = cli.path("tp.sqlite")
        let arguments = [
            "mount", mountpoint, "--protocol", "telepat", "--server", "http://127.0.0.1:9", "--app-id", "app", "--api-key", "k",
            "--token", "t", "--bucket", "blog/posts", "--bucket", "blog/comments", "--store", store,
        ]
        let mounted = try cli.bucketfs(arguments)
        #expect(mounted.status == 0, "\(mounted.stderr)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: mountpoint) == ["blog"])
        #expect(try FileManager.default.contentsOfDirectory(atPath: mountpoint + "/blog").sorted() == ["comments", "posts"])
        try Data("{\"title\": \"offline\"}".utf8).write(to: URL(fileURLWithPath: mountpoint + "/blog/posts/draft.json"))
        #expect(await waitUntil { (try? cli.bucketfs(["status", mountpoint]).stdout.contains("1 save waiting for the server")) == true })
        let status = try cli.bucketfs(["status", mountpoint]).stdout
        #expect(status.contains("offline") || status.contains("connecting"), "\(status)")

        #expect(try cli.bucketfs(["unmount", mountpoint]).status == 0)
        // Mounted again, the save is still there and still owed.
        let again = try cli.bucketfs(arguments)
        #expect(again.status == 0, "\(again.stderr)")
        #expect(try String(contentsOfFile: mountpoint + "/blog/posts/draft.json", encoding: .utf8) == "{\"title\": \"offline\"}")
        #expect(await waitUntil { (try? cli.bucketfs(["status", mountpoint]).stdout.contains("1 save waiting for the server")) == true })
        #expect(try cli.bucketfs(["unmount", mountpoint]).status == 0)
    }

    /// `bucketfs login --protocol telepat` against the real `bucketfs serve --telepat` saves the
    /// remote and its JWT; `mount --remote` mounts it with the Telepat engine, whose socket stays
    /// up through a quiet spell longer than the server's request timeout (2 s here; the socket
    /// is pinged every 30 s); a saved JWT that has expired asks for the login again.
    @Test func aTelepatRemoteSavedByLoginMountsAndStaysConnected() async throws {
        let cli = try CLIHarness()
        let data = try cli.directory("server")
        let added = try cli.bucketfs(["user", "add", "--data", data, "alice@example.com"], stdin: "secret-password\n")
        #expect(added.status == 0, "\(added.stderr)")
        let settings = cli.path("telepat.json")
        try Data("""
            {"applications": [{"id": "tp-app", "api_key": "tp-secret",
              "contexts": [{"id": "c1", "name": "Tasks", "models": ["task"]}]}],
             "jwt_secret": "a CLI test's fixed secret, at least 32 bytes long"}
            """.utf8).write(to: URL(fileURLWithPath: settings))
        let (server, port) = try cli.startServer(data: data, options: ["--telepat", settings, "--request-timeout", "2"])
        defer { cli.stop(server) }
        let login = ["login", "tp", "--protocol", "telepat", "--server", "http://127.0.0.1:\(port)", "--app-id", "tp-app",
            "--api-key", "tp-secret", "--user", "alice@example.com"]
        let wrong = try cli.bucketfs(login, stdin: "not-the-password\n")
        #expect(wrong.status != 0 && wrong.stderr.contains("cannot log in"), "\(wrong.stderr)")
        let loggedIn = try cli.bucketfs(login, stdin: "secret-password\n")
        #expect(loggedIn.status == 0, "\(loggedIn.stderr)")
        let config = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: cli.path("config/bucketfs/config.json"))))
        let remote = try #require((config as? [String: Any])?["remotes"] as? [String: Any])["tp"] as? [String: Any]
        #expect(remote?["protocol"] as? String == "telepat" && remote?["apiKey"] as? String == "tp-secret")
        let credentials = cli.path("config/bucketfs/credentials.json")
        let tokens = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: credentials))) as? [String: String]
        let token = try #require(tokens?["tp"])
        #expect(token.split(separator: ".").count == 3, "a JWT")
        #expect(!(loggedIn.stdout + loggedIn.stderr).contains(token), "the token must never be printed")

        let mountpoint = try cli.directory("tp")
        let log = cli.path("tp.log")
        let mounted = try cli.bucketfs(["mount", mountpoint, "--remote", "tp", "--bucket", "Tasks/task", "--log-file", log])
        #expect(mounted.status == 0, "\(mounted.stderr)")
        try Data("{\"title\": \"via a saved remote\"}".utf8).write(to: URL(fileURLWithPath: mountpoint + "/Tasks/task/new.json"))
        // The server's object replaces the local name: the create went through.
        #expect(await waitUntil {
            let names = (try? FileManager.default.contentsOfDirectory(atPath: mountpoint + "/Tasks/task")) ?? []
            return names.count == 1 && names != ["new.json"]
        })
        // A quiet spell of 3x the server's request timeout: still the first connection.
        try await Task.sleep(for: .seconds(6))
        let logged = try String(contentsOfFile: log, encoding: .utf8)
        #expect(logged.components(separatedBy: "telepat: connected").count - 1 == 1, "\(logged)")
        #expect(try cli.bucketfs(["unmount", mountpoint]).status == 0)

        // A saved JWT that has expired (its claims say so): mount asks for the login again.
        let expired = try JSONSerialization.data(withJSONObject: ["tp": [
            Self.base64URL("{\"alg\":\"HS256\",\"typ\":\"JWT\"}"), Self.base64URL("{\"exp\":1000000000}"), "c2ln",
        ].joined(separator: ".")])
        try expired.write(to: URL(fileURLWithPath: credentials))
        let refused = try cli.bucketfs(["mount", mountpoint, "--remote", "tp", "--bucket", "Tasks/task"])
        #expect(refused.status != 0 && refused.stderr.contains("run bucketfs login tp"), "\(refused.stderr)")
        #expect(!isMounted(mountpoint))
        // A Telepat remote is mounted as one: asking for another protocol is refused.
        let other = try cli.bucketfs(["mount", mountpoint, "--remote", "tp", "--protocol", "simperium", "--bucket", "notes"])
        #expect(other.status != 0 && other.stderr.contains("speaks telepat"), "\(other.stderr)")
    }

    /// A mount of a saved remote renews its JWT before it expires and saves each new one in the
    /// remote's credentials (still 0600), so it keeps working past the first token's life and
    /// the remote mounts again after it (the server's tokens last 20 s here, so they are renewed
    /// every 10 s).
    @Test func aSavedRemoteKeepsItsRenewedTokenAcrossRestarts() async throws {
        let cli = try CLIHarness()
        let data = try cli.directory("server")
        #expect(try cli.bucketfs(["user", "add", "--data", data, "alice@example.com"], stdin: "secret-password\n").status == 0)
        let settings = cli.path("telepat.json")
        try Data("""
            {"applications": [{"id": "tp-app", "api_key": "tp-secret",
              "contexts": [{"id": "c1", "name": "Tasks", "models": ["task"]}]}],
             "jwt_secret": "a CLI test's fixed secret, at least 32 bytes long", "token_lifetime": 20}
            """.utf8).write(to: URL(fileURLWithPath: settings))
        let (server, port) = try cli.startServer(data: data, options: ["--telepat", settings])
        defer { cli.stop(server) }
        let loggedIn = try cli.bucketfs(["login", "tp", "--protocol", "telepat", "--server", "http://127.0.0.1:\(port)", "--app-id", "tp-app",
            "--api-key", "tp-secret", "--user", "alice@example.com"], stdin: "secret-password\n")
        #expect(loggedIn.status == 0, "\(loggedIn.stderr)")
        let credentials = cli.path("config/bucketfs/credentials.json")
        func saved() -> String? {
            (try? JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: credentials))) as? [String: String])?["tp"]
        }
        let first = try #require(saved())
        let firstExpiry = try #require(Self.expiry(of: first))

        let mountpoint = try cli.directory("tp")
        let log = cli.path("tp.log")
        let mount = ["mount", mountpoint, "--remote", "tp", "--bucket", "Tasks/task", "--log-file", log, "--verbose"]
        let mounted = try cli.bucketfs(mount)
        #expect(mounted.status == 0, "\(mounted.stderr)")
        // Renewed and saved before the first token expires; the file is still the owner's only.
        #expect(await waitUntil { saved().flatMap(Self.expiry).map { $0 > firstExpiry } == true },
                "\((try? String(contentsOfFile: log, encoding: .utf8)) ?? "no log")")
        let mode = try FileManager.default.attributesOfItem(atPath: credentials)[.posixPermissions] as? Int
        #expect(mode == 0o600)
        // Past the first token's life the mount still saves.
        try await Task.sleep(for: .seconds(max(firstExpiry.timeIntervalSinceNow + 1, 0)))
        try Data("{\"title\": \"after the first token\"}".utf8).write(to: URL(fileURLWithPath: mountpoint + "/Tasks/task/one.json"))
        func names() -> [String] { ((try? FileManager.default.contentsOfDirectory(atPath: mountpoint + "/Tasks/task")) ?? []).sorted() }
        #expect(await waitUntil { names().count == 1 && names() != ["one.json"] })
        #expect(try cli.bucketfs(["unmount", mountpoint]).status == 0)

        // Mounted again with the saved token (the first has long expired): it still saves.
        let current = try #require(saved())
        #expect(current != first && Self.expiry(of: current).map { $0 > Date() } == true)
        let again = try cli.bucketfs(mount)
        #expect(again.status == 0, "\(again.stderr)")
        try Data("{\"title\": \"after a restart\"}".utf8).write(to: URL(fileURLWithPath: mountpoint + "/Tasks/task/two.json"))
        #expect(await waitUntil { names().count == 2 && !names().contains("two.json") })
        #expect(try cli.bucketfs(["unmount", mountpoint]).status == 0)
    }

    /// A JWT's `exp`, read as any client reads it.
    static func expiry(of token: String) -> Date? {
        let parts = token.split(separator: ".")
        guard parts.count == 3 else { return nil }
        var payload = parts[1].replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while payload.count % 4 != 0 { payload += "=" }
        guard let data = Data(base64Encoded: payload), let claims = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
            let exp = claims["exp"] as? Double
        else { return nil }
        return Date(timeIntervalSince1970: exp)
    }

    static func base64URL(_ text: String) -> String {
        Data(text.utf8).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    /// Polls `condition` for up to `seconds` without holding a thread of the concurrency pool.
    func waitUntil(_ seconds: Double = Patience.seconds, _ condition: () -> Bool) async -> Bool {
        let deadline = Date(timeIntervalSinceNow: seconds)
        while Date() < deadline {
            if condition() { return true }
            try? await Task.sleep(for: .milliseconds(50))
        }
        return condition()
    }
}
