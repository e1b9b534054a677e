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
