import Foundation
import Testing

/// A file removed right after its save stays removed: on the mount that removed it, on another
/// mount of the same user, and on the server (a fresh mount). Each pattern is what scripts, build
/// tools, `git checkout`, test runners and `rsync --delete-after` do, run as a burst the way the
/// issue that found it ran them (issue 34): before the fix the save's create, still waiting in
/// the mount's batch when the removal dropped it from the store, went out anyway, and its echo
/// brought the file back everywhere.
@Suite(.serialized, .timeLimit(.minutes(10)))
struct DeletionHoldsTests {
    enum Pattern: String, CaseIterable, Sendable, CustomTestStringConvertible {
        /// write, close, unlink, in a burst
        case writeCloseUnlink
        /// the same with fsync before close
        case writeFsyncCloseUnlink
        /// 50 ms between close and unlink
        case unlinkFiftyMillisecondsAfterClose
        /// `mv a.json b.json` right after the save
        case renameToAnotherEntity
        /// `mv a.json a.tmp` right after the save
        case renameToAScratchName
        /// an editor's save (tmp + fsync + rename onto e.json), then unlink
        case editorsSaveThenUnlink

        var testDescription: String { rawValue }

        /// One round of the pattern on file number `i`, in Python, in the bucket's directory.
        var round: String {
            switch self {
            case .writeCloseUnlink:
                return "write('g%d.json' % i); os.unlink('g%d.json' % i)"
            case .writeFsyncCloseUnlink:
                return "write('g%d.json' % i, sync=True); os.unlink('g%d.json' % i)"
            case .unlinkFiftyMillisecondsAfterClose:
                return "write('g%d.json' % i); time.sleep(0.05); os.unlink('g%d.json' % i)"
            case .renameToAnotherEntity:
                return "write('a%d.json' % i); os.rename('a%d.json' % i, 'b%d.json' % i)"
            case .renameToAScratchName:
                return "write('a%d.json' % i); os.rename('a%d.json' % i, 'a%d.tmp' % i)"
            case .editorsSaveThenUnlink:
                return "write('.e%d.json.tmp' % i, sync=True); os.rename('.e%d.json.tmp' % i, 'e%d.json' % i); os.unlink('e%d.json' % i)"
            }
        }

        /// What the bucket lists once everything is synced, besides the marker: on the mount
        /// that ran the pattern, and everywhere else.
        func expected(rounds: Int) -> (here: Set<String>, elsewhere: Set<String>) {
            switch self {
            case .renameToAnotherEntity:
                let names = Set((0..<rounds).map { "b\($0).json" })
                return (names, names)
            case .renameToAScratchName:
                return (Set((0..<rounds).map { "a\($0).tmp" }), [])
            default:
                return ([], [])
            }
        }
    }

    static let rounds = 20

    @Test(arguments: Pattern.allCases)
    func aFileRemovedRightAfterItsSaveStaysRemovedEverywhere(_ pattern: Pattern) throws {
        let sandbox = try Sandbox(timeLimit: 400)
        defer { sandbox.close() }
        let server = try ServerProcess.start(in: sandbox)
        let a = try MountProcess(sandbox, at: "a", server: server)
        let b = try MountProcess(sandbox, at: "b", server: server, token: try server.newToken(in: sandbox))

        try Command.python(
            """
            import os, sys, time
            def write(name, sync=False):
                with open(name, 'w') as f:
                    f.write('{"a": 1}\\n')
                    if sync:
                        f.flush(); os.fsync(f.fileno())
            for i in range(int(sys.argv[1])):
                \(pattern.round)
            """, ["\(Self.rounds)"], in: a.path("notes"))
        let expected = pattern.expected(rounds: Self.rounds)

        // Every answer the server sends a comes in order on one connection: once the marker saved
        // after the burst is acknowledged, the echo of anything the burst sent has arrived too.
        let marker = TwoMountTests.pretty(["marker": "true"])
        try Files.write(a.path("notes/marker.json"), marker)
        let synced = try sandbox.bucketfs(["sync", a.mountPoint, "--timeout", "120"], timeout: 180)
        #expect(synced.status == 0, "bucketfs sync: \(synced.stdout) \(synced.stderr)")
        #expect(try Self.names(in: a.path("notes")) == expected.here.union(["marker.json"]))

        // b has everything the server sent before the marker once the marker is there.
        #expect(try Files.waitFor(b.path("notes/marker.json"), toHold: marker, seconds: 120) == marker)
        #expect(try Self.names(in: b.path("notes")) == expected.elsewhere.union(["marker.json"]))

        // The server: a fresh mount with a store of its own.
        let fresh = try MountProcess(sandbox, at: "fresh", server: server, token: try server.newToken(in: sandbox))
        #expect(try Files.waitFor(fresh.path("notes/marker.json"), toHold: marker, seconds: 120) == marker)
        #expect(try Self.names(in: fresh.path("notes")) == expected.elsewhere.union(["marker.json"]))

        // And after a remount of a, nothing comes back from its store either.
        #expect(try a.unmount())
        try a.remount()
        #expect(try Self.names(in: a.path("notes")) == expected.here.union(["marker.json"]))
    }

    static func names(in directory: String) throws -> Set<String> {
        Set(try FileManager.default.contentsOfDirectory(atPath: directory))
    }
}
