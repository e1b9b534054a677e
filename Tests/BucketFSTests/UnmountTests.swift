import BucketFS
import Foundation
import SyncStore
import Testing

/// Unmounting ends the session even when the mount lives on somewhere else.
@Suite(.timeLimit(.minutes(2)))
struct UnmountTests {
    /// `unshare -m` copies every mount into the new namespace; our umount then removes only our
    /// view of it, and the FUSE connection (and our session loop) would live as long as the copy.
    @Test func aMountCopiedIntoAnotherNamespaceStillUnmountsAtOnce() throws {
        let mount = try MountFixture()
        defer { mount.close() }
        try Tool.shell("printf '{\"kept\": true}' > a.json", in: mount.path("notes"))

        let holder = Process()
        holder.executableURL = URL(fileURLWithPath: "/usr/bin/unshare")
        holder.arguments = ["-m", "--propagation", "private", "sh", "-c", "echo ready; exec sleep 60"]
        let output = Pipe()
        holder.standardOutput = output
        holder.standardError = FileHandle.nullDevice
        try holder.run()
        defer {
            kill(holder.processIdentifier, SIGKILL)
            holder.waitUntilExit()
        }
        // The copy exists once the shell runs in the new namespace.
        let ready = output.fileHandleForReading.availableData
        #expect(String(decoding: ready, as: UTF8.self).hasPrefix("ready"))
        let copies = try String(contentsOfFile: "/proc/\(holder.processIdentifier)/mountinfo", encoding: .utf8)
        #expect(copies.contains(mount.mountPoint), "the other namespace holds no copy of the mount")

        let started = ContinuousClock.now
        #expect(mount.fileSystem.unmount(timeout: 20), "the session loop did not end")
        #expect(ContinuousClock.now - started < .seconds(15))
        // The save made before the unmount is in the store.
        #expect(try mount.store.entity(bucket: "notes", key: "a") != nil)
    }
}
