import Foundation
import Testing

/// mkdir at the root starts syncing a new bucket right away; times set by touch survive a remount.
@Suite("new buckets and stored times", .serialized, .timeLimit(.minutes(5)))
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
