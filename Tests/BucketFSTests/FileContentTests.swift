import BucketFS
import Foundation
import SyncStore
import Testing

/// Reads and writes through a real mount: exact bytes, exact sizes, what the store keeps.
@Suite(.serialized, .timeLimit(.minutes(Patience.testMinutes)))
struct FileContentTests {
    @Test func echoCreatesEntityAndReadsBackExactly() throws {
        let mount = try MountFixture()
        defer { mount.close() }
        let text = "{\"title\": \"hello\", \"n\": 1}\n"
        try Tool.shell("echo '{\"title\": \"hello\", \"n\": 1}' > notes/first.json", in: mount.mountPoint)
        let cat = try Tool.run("/bin/cat", [mount.path("notes/first.json")])
        #expect(cat.stdout == text)
        let attributes = try FileManager.default.attributesOfItem(atPath: mount.path("notes/first.json"))
        #expect((attributes[.size] as? Int) == text.utf8.count)
        #expect(try mount.store.readEntity(bucket: "notes", key: "first") == Array(text.utf8))
        let state = try mount.store.entity(bucket: "notes", key: "first")?.state
        #expect(state == .pending, "state \(String(describing: state))")
        let listing = try FileManager.default.contentsOfDirectory(atPath: mount.path("notes"))
        #expect(listing == ["first.json"])
    }

    @Test func invalidJSONIsKeptAsWrittenAndMarkedInvalid() throws {
        let mount = try MountFixture()
        defer { mount.close() }
        try Tool.shell("printf 'not { json' > notes/bad.json", in: mount.mountPoint)
        #expect(try Tool.run("/bin/cat", [mount.path("notes/bad.json")]).stdout == "not { json")
        #expect(try mount.store.entity(bucket: "notes", key: "bad")?.state == .invalid)
        let state = try Tool.python(
            "import os; print(os.getxattr('notes/bad.json', 'user.bucketfs.state').decode())", in: mount.mountPoint)
        #expect(state.stdout == "invalid\n")
        // A top-level array is JSON but not an object: also kept, also invalid.
        try Tool.shell("printf '[1, 2]' > notes/bad.json", in: mount.mountPoint)
        #expect(try Tool.run("/bin/cat", [mount.path("notes/bad.json")]).stdout == "[1, 2]")
        #expect(try mount.store.entity(bucket: "notes", key: "bad")?.state == .invalid)
    }

    @Test func overwriteAppendTruncateAndTouch() throws {
        let mount = try MountFixture()
        defer { mount.close() }
        let dir = mount.path("notes")
        try Tool.shell("printf '{\"a\": 1}' > a.json && printf '{\"a\": 22222}' > a.json", in: dir)
        #expect(try Tool.run("/bin/cat", ["a.json"], directory: dir).stdout == "{\"a\": 22222}")
        try Tool.shell("printf '\\n' >> a.json", in: dir)
        #expect(try mount.store.readEntity(bucket: "notes", key: "a") == Array("{\"a\": 22222}\n".utf8))
        try Tool.shell("truncate -s 4 a.json", in: dir)
        #expect(try Tool.run("/bin/cat", ["a.json"], directory: dir).stdout == "{\"a\"")
        #expect(try FileManager.default.attributesOfItem(atPath: dir + "/a.json")[.size] as? Int == 4)
        try Tool.shell("truncate -s 0 a.json", in: dir)
        #expect(try mount.store.readEntity(bucket: "notes", key: "a") == [])
        try Tool.shell("touch -d '2021-03-04 05:06:07 UTC' a.json", in: dir)
        let stat = try Tool.shell("stat -c %Y a.json", in: dir)
        #expect(stat.stdout == "1614834367\n")
        try Tool.shell("touch b.json", in: dir)
        #expect(try mount.store.lookup(bucket: "notes", name: .entity(key: "b"))?.size == 0)
    }

    /// Closed files' bytes are kept in memory for fast re-opens; every way the bytes can change
    /// while no descriptor is open must show on the next open.
    @Test func reopenAfterEachKindOfChangeShowsTheCurrentBytes() throws {
        let mount = try MountFixture()
        defer { mount.close() }
        let dir = mount.path("notes")
        func cat(_ name: String) throws -> String { try Tool.run("/bin/cat", [name], directory: dir).stdout }
        try Tool.shell("printf '{\"v\": 1}' > c.json", in: dir)
        #expect(try cat("c.json") == "{\"v\": 1}")
        try Tool.shell("truncate -s 3 c.json", in: dir)
        #expect(try cat("c.json") == "{\"v")
        try Tool.shell("printf '{\"v\": 2}' > .c.json.tmp && mv .c.json.tmp c.json", in: dir)
        #expect(try cat("c.json") == "{\"v\": 2}")
        try Tool.shell("rm c.json && printf '{\"v\": 3}' > c.json", in: dir)
        #expect(try cat("c.json") == "{\"v\": 3}")
        try Tool.shell("mv c.json d.json && printf '{\"v\": 4}' > c.json", in: dir)
        #expect(try cat("d.json") == "{\"v\": 3}")
        #expect(try cat("c.json") == "{\"v\": 4}")
        // Remote changes to a cached file: RemoteChangeTests (cat, remote edit, cat).
        #expect(try mount.store.readEntity(bucket: "notes", key: "d") == Array("{\"v\": 3}".utf8))
    }

    @Test func pythonRewriteAndGrep() throws {
        let mount = try MountFixture()
        defer { mount.close() }
        let dir = mount.path("notes")
        _ = try Tool.python(
            """
            import json
            for i in range(20):
                with open(f'n{i}.json', 'w') as f:
                    json.dump({'i': i, 'word': 'needle' if i == 7 else 'hay'}, f)
            with open('n3.json', 'r+') as f:
                data = json.load(f); data['i'] = 333; f.seek(0); f.truncate(); json.dump(data, f)
            """, in: dir)
        let grep = try Tool.shell("grep -rl needle .", in: dir)
        #expect(grep.stdout == "./n7.json\n")
        #expect(try mount.store.readEntity(bucket: "notes", key: "n3") == Array("{\"i\": 333, \"word\": \"hay\"}".utf8))
        #expect(try mount.store.entries(bucket: "notes").count == 20)
    }

    /// New files opened write-only bypass the page cache (no capability lookup per file); other
    /// descriptors still see every write, and a file created for reading too can be mmapped.
    @Test func newFilesStayCoherentAcrossDescriptorsAndMappings() throws {
        let mount = try MountFixture()
        defer { mount.close() }
        let result = try Tool.python(
            """
            import mmap, os
            for name in ['n.json', '.n.json.swp']:
                writer = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                os.write(writer, b'{"a": 1}')
                reader = os.open(name, os.O_RDONLY)
                first = os.pread(reader, 100, 0)
                os.pwrite(writer, b'{"b": 2, "c": 3}', 0)
                second = os.pread(reader, 100, 0)
                os.close(writer)
                os.close(reader)
                print(name, first.decode(), second.decode())
            shared = os.open('m.json', os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
            os.write(shared, b'{"m": 1}')
            view = mmap.mmap(shared, 8, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            view[6:7] = b'2'
            view.flush()
            view.close()
            os.close(shared)
            print(open('m.json').read())
            """, in: mount.path("notes"))
        #expect(result.stdout == """
            n.json {"a": 1} {"b": 2, "c": 3}
            .n.json.swp {"a": 1} {"b": 2, "c": 3}
            {"m": 2}

            """)
        #expect(try mount.store.readEntity(bucket: "notes", key: "n") == Array(#"{"b": 2, "c": 3}"#.utf8))
        #expect(try mount.store.readEntity(bucket: "notes", key: "m") == Array(#"{"m": 2}"#.utf8))
    }

    /// The store on a small disk that fills up: the save fails with ENOSPC (an editor keeps its
    /// buffer and says the disk is full, where EIO would say nothing useful), what was saved
    /// before is intact, and saving works again once there is room.
    @Test func aFullDiskFailsTheSaveWithENOSPCAndLosesNothing() throws {
        let disk = FileManager.default.temporaryDirectory.appendingPathComponent("bucketfs-small-disk-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: disk, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: disk) }
        let mounted = try Tool.run("/usr/bin/mount", ["-t", "tmpfs", "-o", "size=4m", "tmpfs", disk])
        try #require(mounted.status == 0, "cannot mount a small tmpfs: \(mounted.stderr)")
        defer {
            // Lazily when something still holds it (the store's files close a moment after the
            // mount's): each run left a tmpfs mounted under /tmp.
            if (try? Tool.run("/usr/bin/umount", [disk]))?.status != 0 { _ = try? Tool.run("/usr/bin/umount", ["-l", disk]) }
        }
        let mount = try MountFixture(storePath: disk + "/store.sqlite")
        defer { mount.close() }
        let kept = "{\"kept\": true}\n"
        try Data(kept.utf8).write(to: URL(fileURLWithPath: mount.path("notes/kept.json")))

        // 6 MB on a 4 MB disk: close() reports the failed save.
        let save = """
            import errno, os
            fd = os.open('notes/big.json', os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.write(fd, b'{"text": "' + b'x' * 6_000_000 + b'"}\\n')
            try:
                os.close(fd)
                print('saved')
            except OSError as error:
                print(errno.errorcode[error.errno])
            """
        #expect(try Tool.python(save, in: mount.mountPoint).stdout == "ENOSPC\n")
        #expect(try Tool.run("/bin/cat", [mount.path("notes/kept.json")]).stdout == kept)
        #expect(try mount.store.readEntity(bucket: "notes", key: "kept") == Array(kept.utf8))

        // A smaller save fits, and all of it is there after a remount.
        let small = "{\"text\": \"x\"}\n"
        try Data(small.utf8).write(to: URL(fileURLWithPath: mount.path("notes/big.json")))
        try mount.remount()
        #expect(try Tool.run("/bin/cat", [mount.path("notes/big.json")]).stdout == small)
        #expect(try Tool.run("/bin/cat", [mount.path("notes/kept.json")]).stdout == kept)
    }

    @Test func keysArePercentEncodedFileNames() throws {
        let mount = try MountFixture()
        defer { mount.close() }
        let dir = mount.path("notes")
        try Tool.shell("printf '{}' > 'a%2Fb.json' && printf '{}' > '%2Ehidden.json' && printf 'x' > 'plain.txt'", in: dir)
        #expect(try mount.store.lookup(bucket: "notes", name: .entity(key: "a/b")) != nil)
        #expect(try mount.store.lookup(bucket: "notes", name: .entity(key: ".hidden")) != nil)
        #expect(try mount.store.localFile(bucket: "notes", name: "plain.txt")?.content == Array("x".utf8))
        #expect(try mount.store.entity(bucket: "notes", key: "plain") == nil)
        // A name that is not the canonical encoding of a key stays a local file.
        try Tool.shell("printf '{}' > '%61.json'", in: dir)
        #expect(try mount.store.localFile(bucket: "notes", name: "%61.json") != nil)
    }

    @Test func concurrentWritersThroughTheMultiThreadedLoop() throws {
        let mount = try MountFixture()
        defer { mount.close() }
        let result = try Tool.python(
            """
            import json, threading
            errors = []
            def work(t):
                try:
                    for i in range(25):
                        name = f'notes/t{t}-{i}.json'
                        body = json.dumps({'t': t, 'i': i, 'pad': 'x' * (i * 100)})
                        with open(name, 'w') as f: f.write(body)
                        with open(name) as f:
                            if f.read() != body: errors.append(name)
                except Exception as e:
                    errors.append(repr(e))
            threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
            for t in threads: t.start()
            for t in threads: t.join()
            print(len(errors), errors[:3])
            """, in: mount.mountPoint)
        #expect(result.stdout == "0 []\n")
        #expect(try mount.store.entries(bucket: "notes").count == 200)
        #expect(try mount.store.readEntity(bucket: "notes", key: "t7-24")?.count == "{\"t\": 7, \"i\": 24, \"pad\": \"\"}".utf8.count + 2400)
    }

    /// Durability as on a local disk: close and rename keep a change through a crash of the
    /// mount; fsync of the file (dirty or not) or of its directory makes it survive a power loss.
    @Test func fsyncAndFsyncdirMakeEarlierChangesSurvivePowerLoss() throws {
        let mount = try MountFixture()
        defer { mount.close() }
        let script = """
            import os, sys
            def write(name, text, sync=False):
                fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.write(fd, text.encode())
                if sync: os.fsync(fd)
                os.close(fd)
            def fsync(name, flags=os.O_RDONLY):
                fd = os.open(name, flags)
                os.fsync(fd)
                os.close(fd)
            step = sys.argv[1]
            if step == "close": write("notes/a.json", '{"a": 1}')
            if step == "fsync clean": fsync("notes/a.json")
            if step == "fsyncdir": fsync("notes", os.O_RDONLY | os.O_DIRECTORY)
            if step == "fsync dirty": write("notes/c.json", '{"c": 1}', sync=True)
            """
        func run(_ step: String) throws {
            let result = try Tool.run("/usr/bin/python3", ["-c", script, step], directory: mount.mountPoint)
            #expect(result.status == 0, "\(step): \(result.stderr)")
        }
        try run("close")
        #expect(mount.hasUnsyncedChanges)
        try run("fsync clean")
        #expect(!mount.hasUnsyncedChanges)
        try Tool.shell("printf '{\"b\": 0}' > notes/b.json && printf '{\"b\": 1}' > notes/.b.json.tmp", in: mount.mountPoint)
        try Tool.shell("mv notes/.b.json.tmp notes/b.json", in: mount.mountPoint)
        #expect(mount.hasUnsyncedChanges)
        try run("fsyncdir")
        #expect(!mount.hasUnsyncedChanges)
        #expect(try mount.store.readEntity(bucket: "notes", key: "b") == Array("{\"b\": 1}".utf8))
        try run("fsync dirty")
        #expect(!mount.hasUnsyncedChanges)
        #expect(try mount.store.readEntity(bucket: "notes", key: "c") == Array("{\"c\": 1}".utf8))
    }

    /// A new file lives in memory until its first save; an fsync of its directory stores it too.
    @Test func anFsyncOfTheDirectoryStoresAFileCreatedAndStillOpen() throws {
        let mount = try MountFixture()
        defer { mount.close() }
        let descriptor = open(mount.path("notes/new.json"), O_CREAT | O_WRONLY, 0o644)
        try #require(descriptor >= 0)
        defer { close(descriptor) }
        let text = "{\"new\": 1}"
        #expect(text.withCString { Glibc.write(descriptor, $0, strlen($0)) } == text.utf8.count)
        #expect(try mount.store.readEntity(bucket: "notes", key: "new") == nil)
        let directory = open(mount.path("notes"), O_RDONLY | O_DIRECTORY)
        try #require(directory >= 0)
        defer { close(directory) }
        #expect(fsync(directory) == 0)
        #expect(try mount.store.readEntity(bucket: "notes", key: "new") == Array(text.utf8))
        #expect(!mount.hasUnsyncedChanges)
        // Stored under the number the kernel was handed at create.
        var status = stat()
        #expect(fstat(descriptor, &status) == 0)
        let entry = try #require(try mount.store.entries(bucket: "notes").first { $0.name == .entity(key: "new") })
        #expect(UInt64(entry.id) == UInt64(status.st_ino))
    }
}
