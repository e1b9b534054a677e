import Foundation
import Testing

/// A save that returned survives kill -9 of the mount process; SIGTERM saves what an open file
/// still buffers, sends it, unmounts and exits cleanly.
@Suite(.serialized, .timeLimit(.minutes(5)))
struct CrashAndSignalTests {
    @Test func killNineRightAfterASaveThenRemountKeepsAndSendsIt() throws {
        let sandbox = try Sandbox()
        defer { sandbox.close() }
        let server = try ServerProcess.start(in: sandbox)
        let a = try MountProcess(sandbox, at: "a", server: server)
        let b = try MountProcess(sandbox, at: "b", server: server)

        let text = TwoMountTests.pretty(["saved": "\"before the crash\""])
        try Files.write(a.path("notes/crash.json"), text)
        a.process.signal(SIGKILL)
        #expect(a.process.waitForExit(timeout: 30))
        #expect(a.process.exitStatus == SIGKILL)

        try a.remount()
        #expect(try Files.read(a.path("notes/crash.json")) == text)
        #expect(try Files.waitFor(b.path("notes/crash.json"), toHold: text) == text)
    }

    /// Issue 13: a 1 GiB scratch file, once close(2) returned, is in the store (kill -9 right
    /// after loses nothing), and the mount process never held it in memory.
    @Test func aGigabyteScratchFileSurvivesKillNineAfterCloseAndNeverLivesInMemory() throws {
        let sandbox = try Sandbox()
        defer { sandbox.close() }
        let server = try ServerProcess.start(in: sandbox)
        let a = try MountProcess(sandbox, at: "a", server: server)
        let written = try Command.python(
            """
            import hashlib, os, sys
            pool = os.urandom(17 << 20)
            digest = hashlib.sha256()
            fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            for i in range(1024):
                block = i.to_bytes(8, 'little') + pool[i * 16384:i * 16384 + (1 << 20) - 8]
                digest.update(block)
                os.write(fd, block)
            os.close(fd)
            print(digest.hexdigest())
            """, [a.path("notes/big.img")], in: "/", timeout: 180)
        let digest = written.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        // VmHWM: the most the mount process ever had resident (its heap, stacks and SQLite's cache).
        let status = try String(contentsOfFile: "/proc/\(a.process.pid)/status", encoding: .utf8)
        let peak = status.split(separator: "\n").first { $0.hasPrefix("VmHWM:") }
            .flatMap { Int($0.split(separator: " ").dropFirst().first ?? "") }.map { $0 << 10 } ?? Int.max
        a.process.signal(SIGKILL)
        #expect(a.process.waitForExit(timeout: 30))
        #expect(peak < 256 << 20, "the mount process peaked at \(peak >> 20) MiB for a 1 GiB file")

        try a.remount()
        let sum = try Command.run("/usr/bin/sha256sum", [a.path("notes/big.img")], timeout: 120)
        #expect(digest.count == 64 && sum.stdout.hasPrefix(digest), "read back \(sum.stdout), wrote \(digest)")
    }

    @Test func sigtermSavesOpenBuffersSendsThemAndUnmounts() throws {
        let sandbox = try Sandbox()
        defer { sandbox.close() }
        let server = try ServerProcess.start(in: sandbox)
        let a = try MountProcess(sandbox, at: "a", server: server)
        let b = try MountProcess(sandbox, at: "b", server: server)

        // Written but not closed: the bytes sit in the mount's buffer, not in its store yet.
        let text = TwoMountTests.pretty(["signal": "15"])
        let descriptor = open(a.path("notes/term.json"), O_CREAT | O_WRONLY | O_TRUNC, 0o644)
        #expect(descriptor >= 0)
        defer { if descriptor >= 0 { close(descriptor) } }
        let written = text.withCString { Glibc.write(descriptor, $0, strlen($0)) }
        #expect(written == text.utf8.count)

        a.process.signal(SIGTERM)
        #expect(a.process.waitForExit(timeout: 60), "the mount process did not exit after SIGTERM:\n\(a.process.logTail)")
        #expect(a.process.exitStatus == 0, "\(a.process.logTail)")
        #expect(!Mounts.isMounted(a.mountPoint))
        #expect(try Files.waitFor(b.path("notes/term.json"), toHold: text) == text)

        // The store kept it as well: a new mount of it shows the file.
        try a.remount()
        #expect(try Files.read(a.path("notes/term.json")) == text)
    }

    @Test func unmountWithFusermountFlushesAndExits() throws {
        let sandbox = try Sandbox()
        defer { sandbox.close() }
        let server = try ServerProcess.start(in: sandbox)
        let a = try MountProcess(sandbox, at: "a", server: server)
        let b = try MountProcess(sandbox, at: "b", server: server)
        let text = TwoMountTests.pretty(["bye": "true"])
        try Files.write(a.path("notes/bye.json"), text)
        #expect(try a.unmount(), "\(a.process.logTail)")
        #expect(a.process.exitStatus == 0)
        #expect(try Files.waitFor(b.path("notes/bye.json"), toHold: text) == text)
    }
}
