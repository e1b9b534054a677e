import BucketFS
import Foundation
import Testing

/// `bucketfs unmount` ends the mount process even when the mount lives on somewhere else.
@Suite(.timeLimit(.minutes(Patience.testMinutes)))
struct UnmountCommandTests {
    /// `unshare -m` (as a service with PrivateTmp= gets) copies every mount into the new
    /// namespace; fusermount3 then removes only our view, and the mount process would wait for
    /// its file system to end as long as the copy lives.
    @Test func aMountCopiedIntoAnotherNamespaceStillUnmountsAndKeepsItsSaves() throws {
        let cli = try CLIHarness()
        let (server, port, token) = try cli.serverWithUser(data: try cli.directory("server"))
        defer { cli.stop(server) }
        let mountpoint = try cli.directory("mnt")
        try cli.mount(mountpoint, port: port, token: token)
        try Data("{\"kept\": true}\n".utf8).write(to: URL(fileURLWithPath: mountpoint + "/notes/a.json"))

        // The copy lives 600 s unless the holder is stopped at the end of the test.
        let (holder, output) = try cli.startProcess(
            ["/usr/bin/unshare", "-m", "--propagation", "private", "sh", "-c", "echo ready; exec sleep 600"])
        defer { cli.stop(holder) }
        try eventually { text(of: output).hasPrefix("ready") }
        let copies = try #require(ProcFile.text("/proc/\(holder.processIdentifier)/mountinfo"))
        #expect(copies.contains(mountpoint), "the other namespace holds no copy of the mount")

        // At once: unmount waits at most its --timeout for the mount process to end, 120 s, far
        // above what a machine busy with other builds needs (seconds) and far below the copy's
        // 600 s; waiting for the copy to go would fail it.
        let started = Date()
        let unmount = try cli.bucketfs(["unmount", mountpoint, "--timeout", "120"])
        #expect(unmount.status == 0, "unmount failed: \(unmount.stderr)")
        #expect(unmount.stderr.contains("another mount namespace"), "\(unmount.stderr)")
        #expect(Date().timeIntervalSince(started) < 150)

        // The save made before the unmount is there when the same store is mounted again.
        try cli.mount(mountpoint, port: port, token: token)
        let kept = try String(contentsOfFile: mountpoint + "/notes/a.json", encoding: .utf8)
        #expect(kept.contains("\"kept\": true"))
        #expect(try cli.bucketfs(["unmount", mountpoint]).status == 0)
    }
}
