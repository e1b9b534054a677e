import Foundation
import Testing

/// `bucketfs mount DIR` on a fresh machine, and read-only mounts.
@Suite(.serialized, .timeLimit(.minutes(Patience.testMinutes)))
struct DemoAndReadOnlyTests {
    @Test func demoMountShowsSampleNotesInSimplenoteShape() throws {
        let sandbox = try Sandbox()
        defer { sandbox.close() }
        let mountPoint = try sandbox.directory("buckets")
        sandbox.track(mountPoint: mountPoint)
        // No --server, no --foreground: the command starts the demo server, daemonizes and
        // returns once the file system is mounted.
        let mounted = try sandbox.bucketfs(["mount", mountPoint])
        #expect(mounted.status == 0, "\(mounted.stderr)")
        #expect(Mounts.isMounted(mountPoint))
        let pidFiles = (try? FileManager.default.contentsOfDirectory(atPath: sandbox.root + "/state/bucketfs")) ?? []
        let daemon = pidFiles.first { $0.hasSuffix(".pid") }.flatMap {
            try? String(contentsOfFile: sandbox.root + "/state/bucketfs/" + $0, encoding: .utf8)
        }.flatMap { Int32($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
        #expect(daemon != nil, "no pid file in \(pidFiles)")
        if let daemon { sandbox.adopt(pid: daemon) }

        #expect(try FileManager.default.contentsOfDirectory(atPath: mountPoint) == ["notes"])
        let names = try FileManager.default.contentsOfDirectory(atPath: mountPoint + "/notes").sorted()
        #expect(names.count >= 3 && names.allSatisfy { $0.hasSuffix(".json") }, "\(names)")
        for name in names {
            let data = try Data(contentsOf: URL(fileURLWithPath: mountPoint + "/notes/" + name))
            let note = try JSONSerialization.jsonObject(with: data) as? [String: Any]
            #expect(note?["content"] is String, "\(name)")
            #expect(note?["tags"] is [Any], "\(name)")
            #expect(note?["systemTags"] is [Any], "\(name)")
            #expect(note?["creationDate"] is NSNumber, "\(name)")
            #expect(note?["modificationDate"] is NSNumber, "\(name)")
            let text = String(decoding: data, as: UTF8.self)
            #expect(text.contains("\"deleted\": false") || text.contains("\"deleted\": true"), "\(name): \(text)")
        }
        // grep works across the notes, and the mount is writable.
        #expect(try Command.shell("grep -rl content notes | wc -l", in: mountPoint).stdout == "\(names.count)\n")
        try Files.write(mountPoint + "/notes/mine.json", "{\"content\": \"mine\"}\n")
        #expect(try Files.read(mountPoint + "/notes/mine.json") == "{\"content\": \"mine\"}\n")

        let unmounted = try sandbox.bucketfs(["unmount", mountPoint])
        #expect(unmounted.status == 0, "\(unmounted.stderr)")
        #expect(eventually { !Mounts.isMounted(mountPoint) })
        if let daemon { #expect(eventually { kill(daemon, 0) != 0 }) }

        // A second run keeps the notes (and the new one) and adds no second set of samples.
        let again = try sandbox.bucketfs(["mount", mountPoint])
        #expect(again.status == 0, "\(again.stderr)")
        let namesAgain = try FileManager.default.contentsOfDirectory(atPath: mountPoint + "/notes").sorted()
        #expect(namesAgain == (names + ["mine.json"]).sorted())
        if let second = try? String(contentsOfFile: sandbox.root + "/state/bucketfs/" + (pidFiles.first { $0.hasSuffix(".pid") } ?? ""), encoding: .utf8),
            let pid = Int32(second.trimmingCharacters(in: .whitespacesAndNewlines)) {
            sandbox.adopt(pid: pid)
        }
        #expect(try sandbox.bucketfs(["unmount", mountPoint]).status == 0)
    }

    @Test func readOnlyMountRefusesWritesWithEROFS() throws {
        let sandbox = try Sandbox()
        defer { sandbox.close() }
        let server = try ServerProcess.start(in: sandbox)
        let writer = try MountProcess(sandbox, at: "w", server: server)
        let text = TwoMountTests.pretty(["v": "1"])
        try Files.write(writer.path("notes/x.json"), text)
        let reader = try MountProcess(sandbox, at: "r", server: server, extra: ["--read-only"])
        #expect(try Files.waitFor(reader.path("notes/x.json"), toHold: text) == text)

        let refused = try Command.python(
            """
            import errno, os
            def attempt(name, action):
                try:
                    action(); print(name, 'OK')
                except OSError as e:
                    print(name, errno.errorcode[e.errno])
            attempt('overwrite', lambda: open('notes/x.json', 'w'))
            attempt('append', lambda: open('notes/x.json', 'a'))
            attempt('create', lambda: open('notes/new.json', 'w'))
            attempt('unlink', lambda: os.unlink('notes/x.json'))
            attempt('rename', lambda: os.rename('notes/x.json', 'notes/y.json'))
            attempt('mkdir', lambda: os.mkdir('other'))
            attempt('truncate', lambda: os.truncate('notes/x.json', 0))
            attempt('touch', lambda: os.utime('notes/x.json'))
            """, in: reader.mountPoint)
        #expect(refused.stdout == """
            overwrite EROFS
            append EROFS
            create EROFS
            unlink EROFS
            rename EROFS
            mkdir EROFS
            truncate EROFS
            touch EROFS

            """)
        #expect(try Files.read(reader.path("notes/x.json")) == text)
        // Changes from elsewhere still arrive in a read-only mount.
        let newer = TwoMountTests.pretty(["v": "2"])
        try Files.write(writer.path("notes/x.json"), newer)
        #expect(try Files.waitFor(reader.path("notes/x.json"), toHold: newer) == newer)
    }
}
