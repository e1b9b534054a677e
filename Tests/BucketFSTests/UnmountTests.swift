import BucketFS
import ChildProcesses
import Foundation
import SyncStore
import Testing

/// Unmounting ends the session even when the mount lives on somewhere else.
@Suite(.timeLimit(.minutes(Patience.testMinutes)))
struct UnmountTests {
    /// How long the unmount may take and still be "at once".
    static let atOnce: Double = 120
    /// How long the other namespace would keep the mount alive: five times `atOnce`.
    static let holderSeconds: Double = 600

    /// `unshare -m` copies every mount into the new namespace; our umount then removes only our
    /// view of it, and the FUSE connection (and our session loop) would live as long as the copy.
    @Test func aMountCopiedIntoAnotherNamespaceStillUnmountsAtOnce() throws {
        let mount = try MountFixture()
        defer { mount.close() }
        try Tool.shell("printf '{\"kept\": true}' > a.json", in: mount.path("notes"))

        let holder = ChildProcess()
        holder.executableURL = URL(fileURLWithPath: "/usr/bin/unshare")
        // It holds the copy for `holderSeconds` unless killed at the end of the test.
        holder.arguments = ["-m", "--propagation", "private", "sh", "-c", "echo ready; exec sleep \(Int(Self.holderSeconds))"]
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
        let copies = try #require(ProcFile.text("/proc/\(holder.processIdentifier)/mountinfo"))
        #expect(copies.contains(mount.mountPoint), "the other namespace holds no copy of the mount")

        // "At once": the loop ends without waiting for the copy to go, which would take the
        // holder's whole life. `atOnce` is far above what even a machine busy with other builds
        // needs (seconds) and far below that life: a hang guard that still tells the two apart.
        let started = ContinuousClock.now
        #expect(mount.fileSystem.unmount(timeout: Self.atOnce), "the session loop did not end")
        #expect(ContinuousClock.now - started < .seconds(Self.atOnce))
        // The save made before the unmount is in the store.
        #expect(try mount.store.entity(bucket: "notes", key: "a") != nil)
    }

    /// A connection that ended lends its number to the next FUSE mount, and
    /// `/sys/fs/fuse/connections/<number>/abort` then ends that mount. An unmount slow to see
    /// its loop end (a busy machine) aborted "its" number and took a test's fresh mount with it
    /// ("Transport endpoint is not connected"). The handle opened while the number was ours
    /// must never reach the mount that took the number after.
    @Test func anAbortMeantForAnEndedConnectionNeverEndsTheMountThatTookItsNumber() throws {
        // Other tests mount and unmount beside this one: the next mount takes the freed number
        // only when no one else took it first, so try a few times.
        var sameNumber = false
        for _ in 0..<10 where !sameNumber {
            let ended = try MountFixture()
            let device = try #require(MountFixture.fuseDevice(of: ended.mountPoint))
            let abort = try #require(ConnectionAbort(device: device), "no fusectl abort file for \(device)")
            #expect(abort.connectionLives)
            ended.close()
            #expect(!abort.connectionLives)

            let next = try MountFixture()
            defer { next.close() }
            sameNumber = MountFixture.fuseDevice(of: next.mountPoint) == device
            guard sameNumber else { continue }
            abort.abort()
            try Tool.shell("printf '{\"alive\": true}' > alive.json", in: next.path("notes"))
            #expect(try Tool.shell("cat alive.json", in: next.path("notes")).stdout == "{\"alive\": true}")
        }
        #expect(sameNumber, "no later mount took the ended connection's number in ten tries")
    }
}
