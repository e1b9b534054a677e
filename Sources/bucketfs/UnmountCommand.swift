import ArgumentParser
import BucketFS
import ChildProcesses
import Foundation

/// `bucketfs unmount`: unmount and wait until the mount process has stored pending saves and exited.
struct Unmount: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Unmount a bucketfs mount, waiting until its pending saves are stored.")

    @Argument(help: "The mount point.")
    var mountpoint: String

    @Option(help: "Seconds to wait for the mount process to finish.")
    var timeout: Double = 30

    func run() async throws {
        let mountpoint = Paths.absolute(self.mountpoint)
        let pid = (try? String(contentsOfFile: Paths.pidFile(for: mountpoint), encoding: .utf8))
            .flatMap { Int32($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
        guard isMounted(mountpoint) else { throw CommandError("\(mountpoint) is not mounted") }
        // Opened before the umount, while the number is surely this mount's.
        let abort = ConnectionAbort(mountedAt: mountpoint)
        let fusermount = ChildProcess()
        fusermount.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        fusermount.arguments = ["fusermount3", "-u", mountpoint]
        try fusermount.run()
        fusermount.waitUntilExit()
        guard fusermount.terminationStatus == 0 else {
            throw CommandError("fusermount3 -u \(mountpoint) failed: is a file still open there? (lsof +D \(mountpoint))")
        }
        // The mount process stores pending saves and then exits; wait for that.
        if let pid {
            let started = Date()
            let deadline = started.addingTimeInterval(timeout)
            var aborted = false
            while kill(pid, 0) == 0 && Date() < deadline {
                // A copy of the mount in another mount namespace (`unshare -m`, a service with
                // PrivateTmp=) outlives our umount, and the mount process sees its file system
                // end only with the connection: end it, if it is still there.
                if !aborted, let abort, Date().timeIntervalSince(started) > 2, abort.connectionLives {
                    FileHandle.standardError.write(Data("bucketfs: \(mountpoint) lives on in another mount namespace; ending its FUSE connection\n".utf8))
                    abort.abort()
                    aborted = true
                }
                try await Task.sleep(for: .milliseconds(50))
            }
            if kill(pid, 0) == 0 { throw CommandError("the mount process \(pid) is still finishing after \(Int(timeout)) s") }
        }
        print("bucketfs: unmounted \(mountpoint)")
    }
}
