import Foundation
import Testing

/// A save that returned survives kill -9 of the mount process; SIGTERM saves what an open file
/// still buffers, sends it, unmounts and exits cleanly.
@Suite(.serialized, .timeLimit(.minutes(Patience.testMinutes)))
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
        #expect(a.process.waitForExit())
        #expect(a.process.exitStatus == SIGKILL)

        try a.remount()
        #expect(try Files.read(a.path("notes/crash.json")) == text)
        #expect(try Files.waitFor(b.path("notes/crash.json"), toHold: text) == text)
    }

    /// A burst of saves (creates, rewrites, a removal and a rename among them, editors' saves
    /// through scratch files, fsynced or not, and local-only files made, moved and removed)
    /// killed right after its last close: every save that returned is there after a remount,
    /// most of them taken from the save journal the store had not emptied yet, and every entity
    /// reaches the other mount.
    @Test func killNineRightAfterABurstOfSavesThenRemountKeepsEveryOne() throws {
        let sandbox = try Sandbox()
        defer { sandbox.close() }
        let server = try ServerProcess.start(in: sandbox)
        let a = try MountProcess(sandbox, at: "a", server: server)
        let b = try MountProcess(sandbox, at: "b", server: server)
        let burst = try Command.python(
            """
            import json, os, signal, sys
            files = {}
            def save(name, text):
                with open(name, 'w') as f: f.write(text)
                files[name] = text
            for i in range(300):
                save('n%03d.json' % i, '{"i": %d}\\n' % i)
            for i in range(0, 300, 3):
                save('n%03d.json' % i, '{"i": %d, "again": true}\\n' % i)
            os.unlink('n001.json'); del files['n001.json']
            os.rename('n002.json', 'moved.json'); files['moved.json'] = files.pop('n002.json')
            def editor_save(name, text, sync):
                with open('.' + name + '.tmp', 'w') as f:
                    f.write(text)
                    if sync: f.flush(); os.fsync(f.fileno())
                os.rename('.' + name + '.tmp', name)
                files[name] = text
            for i in range(4, 300, 5):
                editor_save('n%03d.json' % i, '{"i": %d, "editor": true}\\n' % i, i % 2 == 0)
            save('kept.swp', 'local only')
            save('gone.swp', 'removed'); os.unlink('gone.swp'); del files['gone.swp']
            save('old.swp', 'moved locally'); os.rename('old.swp', 'new.swp'); files['new.swp'] = files.pop('old.swp')
            for i in range(300, 400):
                save('n%03d.json' % i, '{"i": %d}\\n' % i)
                if i % 10 == 0: editor_save('n%03d.json' % i, '{"i": %d, "editor": true}\\n' % i, i % 20 == 0)
            # Last, so the kill finds some of them still in the journal.
            for i in range(0, 400, 16):
                editor_save('n%03d.json' % i, '{"i": %d, "editor": "last"}\\n' % i, i % 32 == 0)
            os.kill(int(sys.argv[1]), signal.SIGKILL)
            print(json.dumps(files))
            """, ["\(a.process.pid)"], in: a.path("notes"))
        #expect(a.process.waitForExit())
        #expect(a.process.exitStatus == SIGKILL)
        let expected = try JSONDecoder().decode([String: String].self, from: Data(burst.stdout.utf8))
        #expect(expected.count == 401)

        try a.remount()
        let remounted = try Self.files(in: a.path("notes"))
        let differing = expected.filter { name, text in remounted[name] != text }
        #expect(remounted.keys.sorted() == expected.keys.sorted())
        #expect(differing.isEmpty, "differing after the remount: \(differing.keys.sorted().prefix(10))")
        // The other mount shows each value as it renders any remote entity (pretty JSON).
        func values(_ files: [String: String]) -> [String: NSDictionary?] {
            files.mapValues { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? NSDictionary }
        }
        // Local-only files stay on their mount.
        let entities = expected.filter { $0.key.hasSuffix(".json") }
        #expect(entities.count == 399)
        var shown: [String: String] = [:]
        let arrived = eventually {
            shown = (try? Self.files(in: b.path("notes"))) ?? [:]
            return values(shown) == values(entities)
        }
        #expect(arrived, "the other mount shows \(shown.count) files, \(values(shown).filter { values(entities)[$0.key] != $0.value }.count) of them not as saved")
    }

    /// Every file in `directory`, name to text, read in one python3 child.
    static func files(in directory: String) throws -> [String: String] {
        let listing = try Command.python(
            """
            import json, os
            print(json.dumps({name: open(name).read() for name in os.listdir('.')}))
            """, in: directory)
        return try JSONDecoder().decode([String: String].self, from: Data(listing.stdout.utf8))
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
        #expect(a.process.waitForExit())
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
        #expect(a.process.waitForExit(), "the mount process did not exit after SIGTERM:\n\(a.process.logTail)")
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
