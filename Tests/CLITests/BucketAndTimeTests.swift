import Foundation
import Testing

/// mkdir at the root starts syncing a new bucket right away; times set by touch survive a remount.
@Suite("new buckets and stored times", .serialized, .timeLimit(.minutes(Patience.testMinutes)))
struct BucketAndTimeTests {
    @Test func mkdirAddsABucketThatSyncsWithoutRemounting() throws {
        let cli = try CLIHarness()
        let mountpoint = try cli.directory("m")
        #expect(try cli.bucketfs(["mount", mountpoint]).status == 0)
        try FileManager.default.createDirectory(atPath: mountpoint + "/todo", withIntermediateDirectories: false)
        try Data("{\"task\": \"water plants\"}\n".utf8).write(to: URL(fileURLWithPath: mountpoint + "/todo/today.json"))
        // Acknowledged by the server means the new bucket's channel is live.
        try eventually {
            let result = try cli.bucketfs(["status", mountpoint, "--json"])
            let object = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any]
            let mount = (object?["mounts"] as? [[String: Any]])?.first
            let buckets = (mount?["buckets"] as? [[String: Any]])?.compactMap { $0["name"] as? String } ?? []
            return buckets.contains("todo") && (mount?["pendingSaves"] as? Int) == 0
        }
        #expect(try cli.bucketfs(["unmount", mountpoint]).status == 0)
    }

    @Test func rmdirStopsSyncingABucketAndMkdirBringsTheServersCopyBack() throws {
        let cli = try CLIHarness()
        let (server, port, token) = try cli.serverWithUser(data: try cli.directory("server"))
        let first = try cli.directory("one")
        let second = try cli.directory("two")
        try cli.mount(first, port: port, token: token, buckets: ["notes", "todo"])
        try cli.mount(second, port: port, token: token, buckets: ["notes", "todo"])
        try Data("{\"task\": \"water plants\"}\n".utf8).write(to: URL(fileURLWithPath: second + "/todo/today.json"))
        try eventually { FileManager.default.fileExists(atPath: first + "/todo/today.json") }

        // `rm -r` removes the file, then the directory at once: rmdir waits until the server has
        // confirmed the removal it owes (nothing owed is dropped), then forgets the bucket.
        let removed = try cli.run(["/bin/rm", "-r", first + "/todo"], timeout: 60)
        #expect(removed.status == 0, "rm -r failed: \(removed.stderr)")
        #expect(!FileManager.default.fileExists(atPath: first + "/todo"))
        try eventually { !FileManager.default.fileExists(atPath: second + "/todo/today.json") }

        // A change to the removed bucket no longer reaches the first mount; one to `notes`, made
        // after it, does (so the first had its chance to see both).
        try Data("{\"task\": \"later\"}\n".utf8).write(to: URL(fileURLWithPath: second + "/todo/later.json"))
        try Data("{\"after\": true}\n".utf8).write(to: URL(fileURLWithPath: second + "/notes/marker.json"))
        try eventually { FileManager.default.fileExists(atPath: first + "/notes/marker.json") }
        #expect(!FileManager.default.fileExists(atPath: first + "/todo"))

        // mkdir syncs it again, with what the server holds.
        try FileManager.default.createDirectory(atPath: first + "/todo", withIntermediateDirectories: false)
        try eventually { FileManager.default.fileExists(atPath: first + "/todo/later.json") }
        #expect(try String(contentsOfFile: first + "/todo/later.json", encoding: .utf8).contains("later"))
        #expect(!FileManager.default.fileExists(atPath: first + "/todo/today.json"))
        #expect(try cli.bucketfs(["unmount", first]).status == 0)
        #expect(try cli.bucketfs(["unmount", second]).status == 0)
        cli.stop(server)
    }

    @Test func touchTimesSurviveARemount() throws {
        let cli = try CLIHarness()
        let mountpoint = try cli.directory("m")
        #expect(try cli.bucketfs(["mount", mountpoint]).status == 0)
        let file = mountpoint + "/notes/ideas.json"
        let touched = try cli.run(["/usr/bin/env", "touch", "-d", "2020-01-02 03:04:05", file], timeout: 30)
        #expect(touched.status == 0, "\(touched.stderr)")
        let before = try FileManager.default.attributesOfItem(atPath: file)
        #expect(try cli.bucketfs(["unmount", mountpoint]).status == 0)
        #expect(try cli.bucketfs(["mount", mountpoint]).status == 0)
        let after = try FileManager.default.attributesOfItem(atPath: file)
        #expect(after[.modificationDate] as? Date == before[.modificationDate] as? Date)
        #expect((after[.modificationDate] as? Date).map { Calendar(identifier: .gregorian).component(.year, from: $0) } == 2020)
        #expect(after[.systemFileNumber] as? UInt64 == before[.systemFileNumber] as? UInt64)
        #expect(try cli.bucketfs(["unmount", mountpoint]).status == 0)
    }
}
