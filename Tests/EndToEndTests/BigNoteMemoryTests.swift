import Foundation
import Testing

/// Issue 37's memory bar on a real mount (the `bucketfs` binary, a server of its own): a note of
/// 16 MiB holding one string takes the mount's process at most five times its size above its
/// resident memory at rest, at the peak of its whole way (written, journaled, stored, parsed,
/// refused as too large for a message), and the memory goes back once the note is removed. The
/// peak is the kernel's own high-water mark of the process (`VmHWM`, started over before the
/// note): no peak between two samples is missed. `scripts/bench-big-notes` prints the release
/// build's figures and the wall-clock ones beside the bars.
@Suite(.serialized, .timeLimit(.minutes(10)))
struct BigNoteMemoryTests {
    /// A `/proc/PID/status` figure (`VmRSS`, `VmHWM`), in bytes.
    static func memory(_ field: String, of pid: Int32) throws -> Int {
        let status = try String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)
        guard let line = status.split(separator: "\n").first(where: { $0.hasPrefix(field + ":") }),
            let kilobytes = Int(line.split(separator: " ").dropFirst().first ?? "")
        else { throw SandboxError("no \(field) for process \(pid)") }
        return kilobytes << 10
    }

    @Test func aSixteenMiBNoteTakesAtMostFiveTimesItsSizeAndGivesItBack() throws {
        let sandbox = try Sandbox(timeLimit: 500)
        defer { sandbox.close() }
        let server = try ServerProcess.start(in: sandbox)
        let mount = try MountProcess(sandbox, at: "m", server: server)
        let notes = mount.path("notes")
        #expect(eventually { FileManager.default.fileExists(atPath: notes) }, "the notes bucket never showed")
        // At rest once a first small note went there and back.
        try Files.write(notes + "/first.json", #"{"n": 1}"#)
        #expect(eventually { TwoMountTests.state(of: notes + "/first.json") == "synced" })
        let pid = mount.process.pid
        let rest = try Self.memory("VmRSS", of: pid)
        // The high-water mark starts over from the resident size now (clear_refs 5).
        try "5".write(toFile: "/proc/\(pid)/clear_refs", atomically: false, encoding: .utf8)

        let size = 16 << 20
        let big = notes + "/big.json"
        try Command.python(
            """
            import sys
            with open(sys.argv[1], 'wb') as f:
                f.write(b'{"s": "' + b'x' * (int(sys.argv[2]) - 16) + b'"}')
            with open(sys.argv[3], 'w') as f:
                f.write('{"text": "%s"}' % ('y' * 1000))
            """, [big, String(size), notes + "/small.json"], in: "/")
        // The small note saved right after reaches the server; the big one is kept, refused as
        // larger than a message may carry (4 MiB).
        #expect(eventually { TwoMountTests.state(of: notes + "/small.json") == "synced" })
        #expect(eventually { TwoMountTests.state(of: big) == "rejected:413" }, "big: \(TwoMountTests.state(of: big) ?? "-")")
        #expect(try Files.read(big)?.utf8.count == size - 16 + 9)
        let peak = try Self.memory("VmHWM", of: pid)
        print("BigNoteMemoryTests: at rest \(rest >> 20) MiB, peak \(peak >> 20) MiB (bar \((rest + 5 * size) >> 20))")
        #expect(peak < rest + 5 * size, "peak \(peak >> 20) MiB, at rest \(rest >> 20) MiB: over \((rest + 5 * size) >> 20) MiB")

        // Removed, the note's memory goes back (the mount hands it to the system once large
        // work has been quiet for a while: FreedMemory): less than one copy of it stays (the
        // rest grows a few MiB for reasons of its own: SQLite's page cache, malloc's arenas).
        try FileManager.default.removeItem(atPath: big)
        var resident = 0
        #expect(
            eventually {
                resident = (try? Self.memory("VmRSS", of: pid)) ?? .max
                return resident < rest + size
            }, "resident \(resident >> 20) MiB after the note went, at rest \(rest >> 20) MiB")
    }
}
