import BucketFS
import Foundation
import SyncStore
import Testing

/// Issue 13, "One system call takes the whole mount down" and "A descriptor must keep referring
/// to the file it opened", on a real mount. Each case runs on an entity name and a scratch name:
/// the class of bug, not only the reported file.
@Suite(.serialized, .timeLimit(.minutes(Patience.testMinutes)))
struct DescriptorAndLimitTests {
    static let names = ["b.json", "b.tmp"]

    /// Python prints "ok" when the call fails with the named errno, else what happened.
    static func expectErrno(_ errno: String, _ call: String, in directory: String) throws {
        let output = try Tool.python(
            """
            import os, errno
            try:
                \(call)
                print("succeeded")
            except OSError as e:
                print("ok" if e.errno == errno.\(errno) else "errno %d" % e.errno)
            """, in: directory)
        #expect(output.stdout == "ok\n", "\(call): \(output.stdout)")
    }

    @Test func sizesAndOffsetsPastTheLimitFailWithEFBIGAndTheMountLives() throws {
        let mount = try MountFixture()
        defer { mount.close() }
        let dir = mount.path("notes")
        try Tool.shell("echo '{\"keep\": 1}' > keep.json", in: dir)
        for name in Self.names + ["new.json", "new.tmp"] {
            try Self.expectErrno(
                "EFBIG", "fd = os.open('\(name)', os.O_WRONLY | os.O_CREAT); os.pwrite(fd, b'x', 999999999999999)", in: dir)
            try Self.expectErrno("EFBIG", "os.truncate('\(name)', 999999999999999)", in: dir)
            // Just past the default limits (4 GiB for scratch files, 16 MiB for entity files):
            // refused before allocating.
            let limit = name.hasSuffix(".json") ? "16 << 20" : "4 << 30"
            try Self.expectErrno(
                "EFBIG", "fd = os.open('\(name)', os.O_WRONLY | os.O_CREAT); os.pwrite(fd, b'x', \(limit))", in: dir)
            if name.hasSuffix(".json") {
                try Self.expectErrno(
                    "EFBIG", "fd = os.open('\(name)', os.O_WRONLY | os.O_CREAT); os.pwrite(fd, b'x', 1200000000)", in: dir)
            }
        }
        let dd = try Tool.shell(
            "dd if=/dev/zero of=t.tmp bs=1 count=1 seek=999999999999999 conv=notrunc", in: dir, expectSuccess: false)
        #expect(dd.status != 0 && dd.stderr.contains("too large"), "dd: \(dd.stderr)")
        // Times outside what the mount can represent are clamped, not a trap.
        try Tool.shell("touch -d @99999999999 keep.json && touch -d @-99999999999 b.tmp", in: dir)
        #expect(try Tool.run("/bin/cat", ["keep.json"], directory: dir).stdout == "{\"keep\": 1}\n")
        #expect(try Tool.shell("ls", in: dir).status == 0)
    }

    @Test func aWriteThatCrossesTheLimitIsShortAndTheBytesBeforeItAreKept() throws {
        let mount = try MountFixture(options: MountOptions(maxFileSize: 1 << 20))
        defer { mount.close() }
        let dir = mount.path("notes")
        for name in Self.names {
            let output = try Tool.python(
                """
                import os
                fd = os.open('\(name)', os.O_RDWR | os.O_CREAT)
                print(os.pwrite(fd, b'abcd', (1 << 20) - 2))
                os.close(fd)
                print(os.stat('\(name)').st_size)
                """, in: dir)
            #expect(output.stdout == "2\n1048576\n", "\(name): \(output.stdout)")
            try Self.expectErrno("EFBIG", "os.truncate('\(name)', (1 << 20) + 1)", in: dir)
            #expect(try Tool.python("import os; os.truncate('\(name)', 1 << 20)", in: dir).status == 0)
        }
    }

    @Test func aLargeScratchFileIsWrittenInLinearTime() throws {
        // Each write used to copy the whole working copy (copy-on-write under the lock): 200 MiB
        // took over 30 s at 128 KiB per write. 32 MiB in 4 KiB writes is 8,192 writes: copying
        // the file at each would copy 128 GiB, far past the time limit.
        let mount = try MountFixture()
        defer { mount.close() }
        let dir = mount.path("notes")
        try Tool.shell("dd if=/dev/zero of=big.tmp bs=4096 count=8192 status=none", in: dir)
        #expect(try FileManager.default.attributesOfItem(atPath: dir + "/big.tmp")[.size] as? Int == 32 << 20)
        #expect(try mount.store.localFile(bucket: "notes", name: "big.tmp")?.content.count == 32 << 20)
    }

    @Test func aDescriptorKeepsReadingTheFileItOpenedAfterARenameOverIt() throws {
        let mount = try MountFixture()
        defer { mount.close() }
        let dir = mount.path("notes")
        for (name, other) in [("b.json", "new.json"), ("b.json", "new.tmp"), ("b.tmp", "new.json"), ("b.tmp", "new.tmp")] {
            let output = try Tool.python(
                """
                import os
                old = b'{"v": "' + b'o' * (3 << 20) + b'"}'
                with open('\(name)', 'wb') as f: f.write(old)
                fd = os.open('\(name)', os.O_RDONLY)
                first = os.read(fd, 10000)
                with open('\(other)', 'wb') as f: f.write(b'{"v": "new-content"}')
                os.rename('\(other)', '\(name)')
                rest = b''
                while True:
                    chunk = os.read(fd, 1 << 16)
                    if not chunk: break
                    rest += chunk
                print(first + rest == old, os.fstat(fd).st_nlink)
                os.close(fd)
                print(open('\(name)', 'rb').read() == b'{"v": "new-content"}')
                """, in: dir)
            #expect(output.stdout == "True 0\nTrue\n", "\(name) <- \(other): \(output.stdout)")
        }
    }

    @Test func writesThroughAStaleDescriptorNeverReachTheNewFile() throws {
        let mount = try MountFixture()
        defer { mount.close() }
        let dir = mount.path("notes")
        for (name, other) in [("b.json", "new.json"), ("b.json", "new.tmp"), ("b.tmp", "new.json"), ("b.tmp", "new.tmp")] {
            let output = try Tool.python(
                """
                import os
                with open('\(name)', 'wb') as f: f.write(b'{"v": "old"}')
                fd = os.open('\(name)', os.O_RDWR)
                with open('\(other)', 'wb') as f: f.write(b'{"v": "new-content"}')
                os.rename('\(other)', '\(name)')
                os.pwrite(fd, b'XX', 0)
                os.fsync(fd)
                os.close(fd)
                print(open('\(name)', 'rb').read().decode())
                """, in: dir)
            #expect(output.stdout == "{\"v\": \"new-content\"}\n", "\(name) <- \(other): \(output.stdout)")
        }
        #expect(try mount.store.readEntity(bucket: "notes", key: "b") == Array("{\"v\": \"new-content\"}".utf8))
    }

    @Test func unlinkAndRecreateGivesANewInodeAndTheOldDescriptorKeepsItsFile() throws {
        let mount = try MountFixture()
        defer { mount.close() }
        let dir = mount.path("notes")
        for name in Self.names {
            // Several rounds: the number must differ every time, not only when the ids happen to.
            let output = try Tool.python(
                """
                import os
                results = []
                for round in range(5):
                    with open('\(name)', 'wb') as f: f.write(b'{"v": "old"}')
                    fd = os.open('\(name)', os.O_RDWR)
                    old_ino = os.fstat(fd).st_ino
                    os.unlink('\(name)')
                    nlink = os.fstat(fd).st_nlink
                    with open('\(name)', 'wb') as f: f.write(b'{"v": "recreated"}')
                    new_ino = os.stat('\(name)').st_ino
                    os.pwrite(fd, b'XX', 0)
                    reread = os.pread(fd, 100, 0)
                    os.close(fd)
                    content = open('\(name)', 'rb').read()
                    ok = (old_ino != new_ino and nlink == 0 and reread == b'XXv": "old"}'
                          and content == b'{"v": "recreated"}')
                    results.append(ok or (old_ino, new_ino, nlink, reread, content))
                print(results)
                """, in: dir)
            #expect(output.stdout == "[True, True, True, True, True]\n", "\(name): \(output.stdout)")
        }
    }

    @Test func aRenameKeepsTheInodeNumberAcrossForgetAndRemount() throws {
        let mount = try MountFixture()
        defer { mount.close() }
        let dir = mount.path("notes")
        let moves = [("a.json", "b.json"), ("b.json", "c.tmp"), ("c.tmp", "d.json"), ("d.json", "e.json")]
        try Tool.shell("echo '{\"a\": 1}' > a.json && echo '{\"e\": 1}' > e.json", in: dir)
        let inode = try Tool.shell("stat -c %i a.json", in: dir).stdout
        for (from, to) in moves {
            try Tool.shell("mv \(from) \(to) && echo 2 > /proc/sys/vm/drop_caches", in: dir)
            #expect(try Tool.shell("stat -c %i \(to)", in: dir).stdout == inode, "\(from) -> \(to)")
        }
        try mount.remount()
        #expect(try Tool.shell("stat -c %i e.json", in: dir).stdout == inode)
        #expect(try Tool.run("/bin/cat", ["e.json"], directory: dir).stdout == "{\"a\": 1}\n")
    }

    @Test func openWithTruncateShowsTheNewSizeAndTimesAtOnce() throws {
        let mount = try MountFixture()
        defer { mount.close() }
        let dir = mount.path("notes")
        for name in Self.names {
            let output = try Tool.python(
                """
                import os, time
                with open('\(name)', 'wb') as f: f.write(b'{"v": 1}')
                os.utime('\(name)', (1000000000, 1000000000))
                before = os.stat('\(name)')
                fd = os.open('\(name)', os.O_WRONLY | os.O_TRUNC)
                after = os.stat('\(name)')
                print(after.st_size, after.st_mtime > before.st_mtime + 1000, after.st_ctime_ns > before.st_ctime_ns)
                os.close(fd)
                """, in: dir)
            #expect(output.stdout == "0 True True\n", "\(name): \(output.stdout)")
        }
    }

    @Test func timesAndInodesOfEveryFileSurviveARemountExactly() throws {
        let mount = try MountFixture()
        defer { mount.close() }
        let dir = mount.path("notes")
        try Tool.shell(
            "for i in 1 2 3; do echo \"{\\\"n\\\": $i}\" > e$i.json; echo x > s$i.tmp; done; mv s3.tmp e4.json; mv e3.json s4.tmp",
            in: dir)
        let stat = "stat -c '%n %i %s %Y %.9Z' * | sort"
        let before = try Tool.shell(stat, in: dir).stdout
        try mount.remount()
        #expect(try Tool.shell(stat, in: dir).stdout == before)
    }

    @Test func aBucketsTimesFollowItsNamesAndAccessAndLinkTimesAreKept() throws {
        let mount = try MountFixture()
        defer { mount.close() }
        let dir = mount.path("notes")
        let output = try Tool.python(
            """
            import os, time
            def changed(action):
                before = os.stat('.')
                time.sleep(0.01)
                action()
                after = os.stat('.')
                return after.st_mtime_ns > before.st_mtime_ns and after.st_ctime_ns > before.st_ctime_ns
            def write(name):
                with open(name, 'w') as f: f.write('{}')
            print([changed(lambda: write('a.json')), changed(lambda: write('s.tmp')),
                   changed(lambda: os.rename('a.json', 'b.json')), changed(lambda: os.rename('s.tmp', 'b.json')),
                   changed(lambda: os.unlink('b.json')), changed(lambda: os.symlink('x', '.#lock'))])
            write('c.json')
            mtime = os.stat('c.json').st_mtime_ns
            os.utime('c.json', ns=(1000000000 * 10**9, mtime))
            st = os.stat('c.json')
            print(st.st_atime_ns == 1000000000 * 10**9, st.st_mtime_ns == mtime)
            os.utime('.#lock', ns=(3 * 10**9, 4 * 10**9), follow_symlinks=False)
            st = os.lstat('.#lock')
            print(st.st_atime_ns == 3 * 10**9, st.st_mtime_ns == 4 * 10**9)
            """, in: dir)
        #expect(output.stdout == "[True, True, True, True, True, True]\nTrue True\nTrue True\n", "\(output.stdout)")
    }

    @Test func permissionBitsAndAccessTimesAreKeptAcrossRemountsAndSpecialBitsRefused() throws {
        let mount = try MountFixture()
        defer { mount.close() }
        let dir = mount.path("notes")
        try Tool.shell(
            "printf '#!/bin/sh\\necho ran\\n' > run.sh && chmod +x run.sh && echo '{}' > e.json && chmod 600 e.json"
                + " && echo x > src && install -m 0640 src inst.tmp",
            in: dir)
        #expect(try Tool.shell("stat -c '%n %a' run.sh e.json inst.tmp", in: dir).stdout == "run.sh 755\ne.json 600\ninst.tmp 640\n")
        #expect(try Tool.shell("./run.sh", in: dir).stdout == "ran\n")
        try Self.expectErrno("EPERM", "os.chmod('e.json', 0o4755)", in: dir)
        // A save keeps the bits (the node is replaced by the store's entry).
        try Tool.shell("echo '{\"a\": 1}' > e.json && mv inst.tmp moved.tmp", in: dir)
        #expect(try Tool.shell("stat -c '%n %a' e.json moved.tmp", in: dir).stdout == "e.json 600\nmoved.tmp 640\n")
        // Renames between entity and scratch names carry them, and a remount shows them all.
        try Tool.shell("mv e.json e.tmp && mv moved.tmp m.json && touch -a -d @1000000000 m.json", in: dir)
        // (Times of the other files across a remount: timesAndInodesOfEveryFileSurviveARemountExactly.)
        let stat = "stat -c '%n %a' run.sh e.tmp m.json && stat -c %X m.json"
        let before = try Tool.shell(stat, in: dir).stdout
        #expect(before == "run.sh 755\ne.tmp 600\nm.json 640\n1000000000\n", "\(before)")
        try mount.remount()
        #expect(try Tool.shell(stat, in: dir).stdout == before)
        // A name removed and made again is a new file, with the defaults.
        try Tool.shell("rm m.json && echo '{}' > m.json", in: dir)
        #expect(try Tool.shell("stat -c '%a' m.json", in: dir).stdout == "644\n")
    }
}
