import BucketFS
import Foundation
import SyncStore
import Testing

/// What a new file is made with, and which names are one file: as a local disk (ext4) answers.
@Suite(.serialized, .timeLimit(.minutes(Patience.testMinutes)))
struct CreationModeAndNameTests {
    /// Every way a file comes to be (the shell's `>`, open with an explicit mode, mknod, an
    /// editor's scratch file renamed over a note), under three umasks: the mode is open's under
    /// the umask, at once and after a remount; and a chmod afterwards still wins.
    @Test func aNewFileTakesTheModeItWasCreatedWithUnderTheUmask() throws {
        let mount = try MountFixture()
        defer { mount.close() }
        // Each line: the umask, and what each way of creating must give under it.
        let script = """
            import os, stat, sys
            umask, tag = int(sys.argv[1], 8), sys.argv[2]
            os.umask(umask)
            def make(name, mode, data=b''):
                fd = os.open(name, os.O_CREAT | os.O_EXCL | os.O_WRONLY, mode)
                os.write(fd, data); os.close(fd)
            make(f'notes/shell-{tag}.json', 0o666, b'{"a": 1}')
            make(f'notes/explicit-{tag}.json', 0o640, b'{"b": 2}')
            make(f'notes/empty-{tag}.json', 0o600)
            make(f'notes/scratch-{tag}.txt', 0o750, b'local bytes')
            os.mknod(f'notes/node-{tag}.json', 0o604 | stat.S_IFREG)
            make(f'notes/.save-{tag}.json.swp', 0o640, b'{"c": 3}')
            os.rename(f'notes/.save-{tag}.json.swp', f'notes/saved-{tag}.json')
            """
        let umasks = ["022": "u022", "077": "u077", "000": "u000"]
        func expected(_ umask: String) -> [String: Int] {
            let mask = Int(umask, radix: 8)!
            let tag = umasks[umask]!
            return [
                "shell-\(tag).json": 0o666 & ~mask, "explicit-\(tag).json": 0o640 & ~mask,
                "empty-\(tag).json": 0o600 & ~mask, "scratch-\(tag).txt": 0o750 & ~mask,
                "node-\(tag).json": 0o604 & ~mask, "saved-\(tag).json": 0o640 & ~mask,
            ]
        }
        for (umask, tag) in umasks.sorted(by: { $0.key < $1.key }) {
            let made = try Tool.run("/usr/bin/python3", ["-c", script, umask, tag], directory: mount.mountPoint)
            #expect(made.status == 0, "creating under umask \(umask): \(made.stderr)")
        }
        func checkModes(_ when: String) throws {
            for umask in umasks.keys {
                for (name, mode) in expected(umask) {
                    let attributes = try FileManager.default.attributesOfItem(atPath: mount.path("notes/\(name)"))
                    let actual = (attributes[.posixPermissions] as? Int) ?? -1
                    #expect(actual == mode, "\(when): \(name) under umask \(umask) is \(String(actual, radix: 8)), not \(String(mode, radix: 8))")
                }
            }
        }
        try checkModes("just made")
        try mount.remount()
        try checkModes("after a remount")
        // The bytes went with the mode: an entity and a local file both stored whole.
        #expect(try String(contentsOfFile: mount.path("notes/scratch-u077.txt"), encoding: .utf8) == "local bytes")
        #expect(try mount.store.entity(bucket: "notes", key: "saved-u077") != nil)
        // chmod of a file made private still works, and is kept.
        try Tool.shell("chmod 644 notes/explicit-u077.json", in: mount.mountPoint)
        try mount.remount()
        let chmodded = try FileManager.default.attributesOfItem(atPath: mount.path("notes/explicit-u077.json"))
        #expect(chmodded[.posixPermissions] as? Int == 0o644)
    }

    /// `café.json` composed (NFC) and decomposed (NFD) are two names on ext4 and two keys
    /// (`caf%C3%A9`, `cafe%CC%81`): two files here, each with its own O_EXCL, bytes and entity,
    /// across a remount.
    @Test func canonicallyEquivalentNamesAreTwoFiles() throws {
        let mount = try MountFixture()
        defer { mount.close() }
        let script = """
            import os, errno, json
            nfc, nfd = 'notes/caf\\u00e9.json', 'notes/cafe\\u0301.json'
            for name, value in ((nfc, 1), (nfd, 2)):
                fd = os.open(name, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
                os.write(fd, json.dumps({"spelling": value}).encode()); os.close(fd)
            for name in (nfc, nfd):
                try:
                    os.close(os.open(name, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
                    print('O_EXCL succeeded on an existing', ascii(name))
                except OSError as e:
                    assert e.errno == errno.EEXIST, e
            print(json.dumps(sorted(n.encode().hex() for n in os.listdir('notes') if n.startswith('caf'))))
            """
        let output = try Tool.python(script, in: mount.mountPoint)
        #expect(!output.stdout.contains("O_EXCL succeeded"), "\(output.stdout)")
        let nfcHex = Array("caf\u{E9}.json".utf8).map { String(format: "%02x", $0) }.joined()
        let nfdHex = Array("cafe\u{301}.json".utf8).map { String(format: "%02x", $0) }.joined()
        #expect(output.stdout.contains(nfcHex) && output.stdout.contains(nfdHex), "listing: \(output.stdout)")

        func checkBoth(_ when: String) throws {
            let read = try Tool.python(
                """
                import json
                for name in ('notes/caf\\u00e9.json', 'notes/cafe\\u0301.json'):
                    print(json.load(open(name))['spelling'])
                """, in: mount.mountPoint)
            #expect(read.stdout == "1\n2\n", "\(when): \(read.stdout) \(read.stderr)")
        }
        try checkBoth("just written")
        let nfc = try #require(try mount.store.entity(bucket: "notes", key: "caf%C3%A9"))
        let nfd = try #require(try mount.store.entity(bucket: "notes", key: "cafe%CC%81"))
        #expect(nfc.id != nfd.id && nfc.nodeID != nfd.nodeID)
        try mount.remount()
        try checkBoth("after a remount")
        // Removing one spelling leaves the other.
        try Tool.python("import os; os.unlink('notes/cafe\\u0301.json')", in: mount.mountPoint)
        let left = try Tool.python(
            "import os; print([n.encode().hex() for n in os.listdir('notes') if n.startswith('caf')])", in: mount.mountPoint)
        #expect(left.stdout.contains(nfcHex) && !left.stdout.contains(nfdHex), "\(left.stdout)")
        #expect(try mount.store.entity(bucket: "notes", key: "caf%C3%A9") != nil)
        #expect(try mount.store.entity(bucket: "notes", key: "cafe%CC%81") == nil)
    }

    /// A file kept on this device only says so in its state, as `bucketfs status` does.
    @Test func aLocalFileSaysItIsLocal() throws {
        let mount = try MountFixture()
        defer { mount.close() }
        try Tool.shell("echo scratch > notes/notes.txt && echo '{}' > 'notes/100%.json' && echo '{}' > notes/n.json", in: mount.mountPoint)
        let output = try Tool.python(
            """
            import os
            for name in ('notes/notes.txt', 'notes/100%.json'):
                print(os.getxattr(name, 'user.bucketfs.state').decode(), sorted(os.listxattr(name)))
            print('user.bucketfs.key' in os.listxattr('notes/n.json'))
            """, in: mount.mountPoint)
        #expect(output.stdout == "local ['user.bucketfs.state']\nlocal ['user.bucketfs.state']\nTrue\n", "\(output.stdout)")
    }
}
