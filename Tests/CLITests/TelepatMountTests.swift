import Foundation
import Testing

/// `bucketfs mount --protocol telepat`: the second engine behind the same seam, store and file
/// system. These run without a Telepat server (a port nothing listens on): what the mount does
/// on its own. Against a server: EndToEndTests.
@Suite("Telepat mounts", .serialized, .timeLimit(.minutes(5)))
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
        #expect(await waitUntil(30) { (try? cli.bucketfs(["status", mountpoint]).stdout.contains("1 save waiting for the server")) == true })
        let status = try cli.bucketfs(["status", mountpoint]).stdout
        #expect(status.contains("offline") || status.contains("connecting"), "\(status)")

        #expect(try cli.bucketfs(["unmount", mountpoint]).status == 0)
        // Mounted again, the save is still there and still owed.
        let again = try cli.bucketfs(arguments)
        #expect(again.status == 0, "\(again.stderr)")
        #expect(try String(contentsOfFile: mountpoint + "/blog/posts/draft.json", encoding: .utf8) == "{\"title\": \"offline\"}")
        #expect(await waitUntil(30) { (try? cli.bucketfs(["status", mountpoint]).stdout.contains("1 save waiting for the server")) == true })
        #expect(try cli.bucketfs(["unmount", mountpoint]).status == 0)
    }

    /// Polls `condition` for up to `seconds` without holding a thread of the concurrency pool.
    func waitUntil(_ seconds: Double, _ condition: () -> Bool) async -> Bool {
        let deadline = Date(timeIntervalSinceNow: seconds)
        while Date() < deadline {
            if condition() { return true }
            try? await Task.sleep(for: .milliseconds(50))
        }
        return condition()
    }
}
