import BucketFS
import Foundation
import SyncStore
import Testing

/// The save patterns of real editors and tools: rename-over, scratch files, rsync, cp/mv/rm.
@Suite(.serialized, .timeLimit(.minutes(Patience.testMinutes)))
struct ToolWorkflowTests {
    @Test func sedInPlaceIsOneSaveAndLeavesNoScratch() throws {
        let mount = try MountFixture()
        defer { mount.close() }
        let dir = mount.path("notes")
        try Tool.shell("printf '{\"v\": \"old\"}\\n' > s.json", in: dir)
        let before = try mount.store.entity(bucket: "notes", key: "s")
        try Tool.shell("sed -i 's/old/new/' s.json", in: dir)
        #expect(try Tool.run("/bin/cat", ["s.json"], directory: dir).stdout == "{\"v\": \"new\"}\n")
        #expect(try mount.store.readEntity(bucket: "notes", key: "s") == Array("{\"v\": \"new\"}\n".utf8))
        // Same entity (same id; the file is sed's new one, as on any file system), and sed's
        // temporary file is gone from the store.
        #expect(try mount.store.entity(bucket: "notes", key: "s")?.id == before?.id)
        #expect(try mount.store.entries(bucket: "notes").map(\.name) == [.entity(key: "s")])
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir) == ["s.json"])
    }

    @Test func vimWritesThroughBackupAndSwapFiles() throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/vim") else { return }
        let mount = try MountFixture()
        defer { mount.close() }
        let dir = mount.path("notes")
        try Tool.shell("printf '{\"v\": 1}\\n' > v.json", in: dir)
        try Tool.shell("vim -u NONE -es -c '%s/1/2/' -c 'wq' v.json", in: dir)
        #expect(try Tool.run("/bin/cat", ["v.json"], directory: dir).stdout == "{\"v\": 2}\n")
        #expect(try mount.store.readEntity(bucket: "notes", key: "v") == Array("{\"v\": 2}\n".utf8))
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir).sorted() == ["v.json"])
        #expect(try mount.store.entity(bucket: "notes", key: "v~") == nil)
    }

    @Test func renameOverFromScratchFileIsAtomicSave() throws {
        let mount = try MountFixture()
        defer { mount.close() }
        let dir = mount.path("notes")
        try Tool.shell("printf '{\"n\": 1}' > r.json", in: dir)
        _ = try Tool.python(
            """
            import os
            with open('.r.json.Xy12Ab', 'w') as f:
                f.write('{"n": 2}')
                f.flush(); os.fsync(f.fileno())
            os.rename('.r.json.Xy12Ab', 'r.json')
            print(open('r.json').read())
            """, in: dir)
        #expect(try mount.store.readEntity(bucket: "notes", key: "r") == Array("{\"n\": 2}".utf8))
        #expect(try mount.store.localFile(bucket: "notes", name: ".r.json.Xy12Ab") == nil)
        #expect(try Tool.run("/bin/cat", ["r.json"], directory: dir).stdout == "{\"n\": 2}")
        #expect(try FileManager.default.attributesOfItem(atPath: dir + "/r.json")[.size] as? Int == 8)
    }

    @Test func scratchFilesStayLocal() throws {
        let mount = try MountFixture()
        defer { mount.close() }
        let dir = mount.path("notes")
        try Tool.shell(
            "printf 'swap' > .k.json.swp && printf '{}' > 'k.json~' && printf 'x' > 4913 && printf 'n' > notes.txt",
            in: dir)
        for name in [".k.json.swp", "k.json~", "4913", "notes.txt"] {
            #expect(try mount.store.localFile(bucket: "notes", name: name) != nil, "\(name) not local")
        }
        #expect(try mount.store.entries(bucket: "notes").allSatisfy { if case .localFile = $0.name { true } else { false } })
        #expect(try Tool.run("/bin/cat", [".k.json.swp"], directory: dir).stdout == "swap")
        // emacs lock links: local-only symlinks.
        try Tool.shell("ln -s 'user@host.42:1700000000' .#k.json", in: dir)
        #expect(try Tool.shell("readlink .#k.json", in: dir).stdout == "user@host.42:1700000000\n")
        try Tool.shell("rm .#k.json", in: dir)
        // An entity name cannot be a symlink.
        #expect(try Tool.shell("ln -s x k.json", in: dir, expectSuccess: false).status != 0)
    }

    @Test func copyMoveRemove() throws {
        let mount = try MountFixture()
        defer { mount.close() }
        let dir = mount.path("notes")
        try Tool.shell("printf '{\"c\": 1}' > a.json && cp a.json b.json && mv b.json c.json", in: dir)
        #expect(try mount.store.readEntity(bucket: "notes", key: "c") == Array("{\"c\": 1}".utf8))
        #expect(try mount.store.readEntity(bucket: "notes", key: "b") == nil)
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir).sorted() == ["a.json", "c.json"])
        #expect(try Tool.run("/bin/cat", ["c.json"], directory: dir).stdout == "{\"c\": 1}")
        try Tool.shell("rm a.json c.json", in: dir)
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir) == [])
        #expect(try mount.store.readEntity(bucket: "notes", key: "a") == nil)
        // Across buckets rename is EXDEV, so mv copies then removes.
        try Tool.shell("mkdir ../other && printf '{}' > m.json && mv m.json ../other/", in: dir)
        #expect(try mount.store.readEntity(bucket: "other", key: "m") == Array("{}".utf8))
        #expect(try mount.store.readEntity(bucket: "notes", key: "m") == nil)
    }

    @Test func rsyncTwiceTransfersNothingTheSecondTime() throws {
        let mount = try MountFixture()
        defer { mount.close() }
        let source = mount.directory.appendingPathComponent("src").path
        try FileManager.default.createDirectory(atPath: source, withIntermediateDirectories: true)
        for index in 0..<30 {
            try Data("{\"i\": \(index)}\n".utf8).write(to: URL(fileURLWithPath: source + "/e\(index).json"))
        }
        // A directory time that cannot match by accident (rsync -a also copies directory times).
        try Tool.shell("touch -d '2020-02-02 02:02:02 UTC' \(source)", in: mount.directory.path)
        let first = try Tool.shell("rsync -a --itemize-changes \(source)/ \(mount.path("notes"))/", in: mount.mountPoint)
        #expect(first.stdout.split(separator: "\n").count >= 30)
        let second = try Tool.shell("rsync -a --itemize-changes \(source)/ \(mount.path("notes"))/", in: mount.mountPoint)
        #expect(second.stdout == "", "second rsync changed: \(second.stdout)")
        let diff = try Tool.shell("diff -r \(source) \(mount.path("notes"))", in: mount.mountPoint)
        #expect(diff.stdout == "")
        #expect(try mount.store.entries(bucket: "notes").count == 30)
        #expect(try mount.store.readEntity(bucket: "notes", key: "e7") == Array("{\"i\": 7}\n".utf8))
        #expect(try Tool.shell("stat -c %Y notes", in: mount.mountPoint).stdout == "1580608922\n")
    }
}
