@testable import BucketFS
import Foundation
import JSONDiff
import SyncStore
import Testing

/// Remote changes reach the kernel: cached names, sizes and pages are invalidated.
@Suite(.serialized, .timeLimit(.minutes(Patience.testMinutes)))
struct RemoteChangeTests {
    /// The server changed `key` from `old` (nil: a new entity) to `new` at `version`, applied the
    /// way the engine applies a `c` message (spec "Receiving Remote Changes").
    func remoteSave(_ mount: MountFixture, key: String, version: Int, old: JSONObject?, new: JSONObject) throws {
        var diff: JSONObject = [:]
        for (name, value) in new where old?[name] != value {
            diff[name] = .object(["o": .string(old?[name] == nil ? "+" : "r"), "v": value])
        }
        for name in (old ?? [:]).keys where new[name] == nil {
            diff[name] = .object(["o": .string("-")])
        }
        let change = RemoteChange(
            key: key, operation: .modify(diff: diff), sourceVersion: old == nil ? nil : version - 1, endVersion: version,
            cv: "cv-\(key)-\(version)")
        let outcome = try mount.store.applyRemote(bucket: "notes", changes: [change])
        #expect(outcome.reloads.isEmpty, "the store did not apply the change to \(key)")
    }

    /// Notes `n0` ... from elsewhere, each `{"i": index}`; returns their file names.
    func remoteNotes(_ mount: MountFixture, count: Int) throws -> Set<String> {
        var names = Set<String>()
        for index in 0 ..< count {
            try remoteSave(mount, key: "n\(index)", version: 1, old: nil, new: ["i": .integer(Int64(index))])
            names.insert("n\(index).json")
        }
        return names
    }

    @Test func remoteEditCreateAndRemoveShowUpInTheMount() throws {
        let mount = try MountFixture()
        defer { mount.close() }
        try remoteSave(mount, key: "r", version: 1, old: nil, new: ["v": .integer(1)])
        let path = mount.path("notes/r.json")
        #expect(try Tool.run("/bin/cat", [path]).stdout == "{\n  \"v\": 1\n}\n")
        let missing = try Tool.run("/bin/cat", [mount.path("notes/later.json")])
        #expect(missing.status != 0)

        // Kernel caches hold the old size (long attr timeout) and a negative entry for later.json.
        try remoteSave(mount, key: "r", version: 2, old: ["v": .integer(1)], new: ["v": .string("a much longer value")])
        try remoteSave(mount, key: "later", version: 1, old: nil, new: ["n": .integer(5)])
        let expected = "{\n  \"v\": \"a much longer value\"\n}\n"
        #expect(try eventually { try Tool.run("/bin/cat", [path]).stdout == expected })
        #expect(try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int == expected.utf8.count)
        #expect(try eventually { try Tool.run("/bin/cat", [mount.path("notes/later.json")]).stdout == "{\n  \"n\": 5\n}\n" })

        let removal = RemoteChange(key: "later", operation: .remove, sourceVersion: 1, endVersion: 2, cv: "cv9")
        _ = try mount.store.applyRemote(bucket: "notes", changes: [removal])
        #expect(eventually { !FileManager.default.fileExists(atPath: mount.path("notes/later.json")) })
        #expect(try FileManager.default.contentsOfDirectory(atPath: mount.path("notes")) == ["r.json"])
    }

    /// The kernel keeps a directory's listing from one open to the next (`FOPEN_CACHE_DIR`), so
    /// every way a name comes or goes must reach the next `ls`: remote creations and removals,
    /// and creations, removals, renames and links made through the mount, in a bucket larger
    /// than one readdir reply (offsets into a listing the kernel cached part of).
    @Test func everyChangeOfNamesShowsInTheNextListingOfACachedDirectory() throws {
        let mount = try MountFixture()
        defer { mount.close() }
        let bucket = mount.path("notes")
        var expected = try remoteNotes(mount, count: 600)
        /// The names in the order the directory hands them over (`ls -U`): sorted, as `ls` would
        /// sort them, so `ls` of a big bucket has little left to do.
        func listing() throws -> Set<String> {
            let output = try Tool.run("/bin/ls", ["-1", "-A", "-U", bucket])
            #expect(output.status == 0, "\(output.stderr)")
            let names = output.stdout.split(separator: "\n").map(String.init)
            #expect(names == names.sorted(), "not in order: \(zip(names, names.dropFirst()).first { $0.0 > $0.1 }.map { "\($0) before \($1)" } ?? "")")
            return Set(names)
        }
        /// Lists twice (the second from the kernel's cache), waiting for a remote change to land.
        func expectListing(_ step: String) throws {
            let settled = try eventually { try listing() == expected }
            let difference = try listing().symmetricDifference(expected).sorted()
            #expect(settled, "\(step): \(difference)")
            let again = try listing()
            #expect(again == expected, "\(step), listed again: \(again.symmetricDifference(expected).sorted())")
        }
        try expectListing("remote creations")

        try remoteSave(mount, key: "late", version: 1, old: nil, new: ["l": .integer(1)])
        expected.insert("late.json")
        try expectListing("a remote creation")

        _ = try mount.store.applyRemote(
            bucket: "notes", changes: [RemoteChange(key: "n7", operation: .remove, sourceVersion: 1, endVersion: 2, cv: "cv-n7-2")])
        expected.remove("n7.json")
        try expectListing("a remote removal")

        #expect(FileManager.default.createFile(atPath: "\(bucket)/local.json", contents: Data("{}".utf8)))
        expected.insert("local.json")
        try expectListing("a creation here")

        try FileManager.default.moveItem(atPath: "\(bucket)/n8.json", toPath: "\(bucket)/moved.json")
        expected.remove("n8.json")
        expected.insert("moved.json")
        try expectListing("a rename here")

        #expect(rename("\(bucket)/moved.json", "\(bucket)/n9.json") == 0)
        expected.remove("moved.json")
        try expectListing("a rename over another file")

        try FileManager.default.removeItem(atPath: "\(bucket)/n10.json")
        expected.remove("n10.json")
        try expectListing("a removal here")

        try FileManager.default.createSymbolicLink(atPath: "\(bucket)/.#n11.json", withDestinationPath: "user@host.1:1")
        expected.insert(".#n11.json")
        try expectListing("a lock link")
    }

    /// A big bucket's listing leaves memory once the kernel forgot every file in it (issue 40: it
    /// held ~900 bytes per file for the mount's life), and what changed meanwhile shows after.
    @Test func aListingTheKernelForgotLeavesMemoryAndComesBackWithWhatChangedMeanwhile() throws {
        var options = MountOptions()
        options.releasedListingSize = 200
        let mount = try MountFixture(options: options)
        defer { mount.close() }
        let bucket = mount.path("notes")
        var expected = try remoteNotes(mount, count: 300)
        var status = Glibc.stat()
        let statted = lstat(bucket, &status)
        #expect(statted == 0)
        let bucketInode = UInt64(status.st_ino)
        // Other tests drop the kernel's caches too (the model tests): until the checks below, a
        // directory handle holds the listing and O_PATH descriptors hold the files read.
        let heldListing = try #require(opendir(bucket))
        let pathOnly: Int32 = 0o10000000  // O_PATH (fcntl.h; the Glibc module leaves it out): no FUSE open
        let heldFiles = (10 ... 19).map { Glibc.open("\(bucket)/n\($0).json", pathOnly) }
        #expect(heldFiles.allSatisfy { $0 >= 0 })
        let lines = try Tool.run("/bin/ls", ["-l", bucket]).stdout.split(separator: "\n").count
        #expect(lines == 301)
        let nodesListed = mount.fileSystem.state.withLock { $0.table.nodes.count }
        #expect(nodesListed > 300)
        try Tool.shell("cat n1?.json > /dev/null", in: bucket)
        // A close's RELEASE reaches the mount after close(2) has returned.
        #expect(eventually { mount.fileSystem.state.withLock { $0.closedFiles.count } >= 10 })
        closedir(heldListing)
        for descriptor in heldFiles { Glibc.close(descriptor) }

        func forgotten() -> Bool {
            let fd = Glibc.open("/proc/sys/vm/drop_caches", O_WRONLY)
            if fd >= 0 {
                _ = Glibc.write(fd, "2\n", 2)
                Glibc.close(fd)
            }
            return !mount.fileSystem.isLoaded(bucketInode)
        }
        // A lock link lives only in memory: the listing stays while it is there.
        try FileManager.default.createSymbolicLink(atPath: "\(bucket)/.#n1.json", withDestinationPath: "user@host.1:1")
        _ = forgotten()
        #expect(try FileManager.default.destinationOfSymbolicLink(atPath: "\(bucket)/.#n1.json") == "user@host.1:1")
        try FileManager.default.removeItem(atPath: "\(bucket)/.#n1.json")

        #expect(eventually { forgotten() }, "the listing stayed in memory")
        let nodesLeft = mount.fileSystem.state.withLock { $0.table.nodes.count }
        #expect(nodesLeft < 20, "\(nodesLeft) nodes kept of \(nodesListed)")
        #expect(mount.fileSystem.state.withLock { $0.closedFiles.count } == 0, "the bytes of files the kernel forgot are kept")

        // Changes from elsewhere while nothing of the bucket is in memory.
        try remoteSave(mount, key: "n1", version: 2, old: ["i": .integer(1)], new: ["i": .string("changed while forgotten")])
        _ = try mount.store.applyRemote(
            bucket: "notes", changes: [RemoteChange(key: "n2", operation: .remove, sourceVersion: 1, endVersion: 2, cv: "cv-n2-2")])
        try remoteSave(mount, key: "late", version: 1, old: nil, new: ["l": .integer(1)])
        expected.remove("n2.json")
        expected.insert("late.json")
        #expect(try eventually { Set(try FileManager.default.contentsOfDirectory(atPath: bucket)) == expected })
        #expect(try eventually { try Tool.run("/bin/cat", ["\(bucket)/n1.json"]).stdout == "{\n  \"i\": \"changed while forgotten\"\n}\n" })
        #expect(try Tool.run("/bin/cat", ["\(bucket)/late.json"]).stdout == "{\n  \"l\": 1\n}\n")

        // Saves, renames and removals through the mount after it came back.
        try Tool.shell("printf '{\"s\": 1}' > n3.json && mv n4.json moved.json && rm n5.json", in: bucket)
        expected.subtract(["n4.json", "n5.json"])
        expected.insert("moved.json")
        #expect(Set(try FileManager.default.contentsOfDirectory(atPath: bucket)) == expected)
        #expect(try eventually { try mount.store.entity(bucket: "notes", key: "n3")?.value == ["s": .integer(1)] })
        #expect(try eventually { try mount.store.entity(bucket: "notes", key: "moved")?.value == ["i": .integer(4)] })
        #expect(try eventually { try mount.store.entity(bucket: "notes", key: "n5")?.deletedPending ?? true })
    }

    @Test func unmountSavesWhatAnOpenFileStillBuffers() throws {
        let mount = try MountFixture()
        defer { mount.close() }
        let path = mount.path("notes/open.json")
        let descriptor = open(path, O_CREAT | O_WRONLY, 0o644)
        #expect(descriptor >= 0)
        let text = "{\"unsaved\": true}"
        let written = text.withCString { Glibc.write(descriptor, $0, strlen($0)) }
        #expect(written == text.utf8.count)
        // The write is only buffered: nothing saved before flush/close (a file created in
        // memory is not in the store at all until then).
        #expect(try mount.store.readEntity(bucket: "notes", key: "open") == nil)
        // Unmounting while the file is open: the buffer is saved to the store right away, even
        // though the kernel may keep the file system alive until the descriptor is closed.
        let ended = mount.fileSystem.unmount(timeout: 2)
        let store = try SyncStore(path: mount.storePath)
        #expect(try store.readEntity(bucket: "notes", key: "open") == Array(text.utf8))
        close(descriptor)
        #expect(ended || mount.fileSystem.waitUntilStopped(timeout: Patience.seconds))
        try store.close()
    }

    /// What the signal handler does, called directly: a real SIGTERM would reach every test in
    /// this shared runner process (EndToEndTests sends one to a real `bucketfs mount` process).
    @Test func terminateSavesBuffersAndUnmounts() throws {
        let mount = try MountFixture()
        defer { mount.close() }
        let path = mount.path("notes/sig.json")
        let descriptor = open(path, O_CREAT | O_WRONLY, 0o644)
        #expect(descriptor >= 0)
        let text = "{\"signal\": 15}"
        _ = text.withCString { Glibc.write(descriptor, $0, strlen($0)) }
        mount.fileSystem.terminate()
        let reader = try SyncStore(path: mount.storePath)
        #expect(try reader.readEntity(bucket: "notes", key: "sig") == Array(text.utf8))
        try reader.close()
        close(descriptor)
        #expect(mount.fileSystem.waitUntilStopped(timeout: Patience.seconds))
        #expect(MountFixture.fuseDevice(of: mount.mountPoint) == nil)
    }

    /// A file opened again with the bytes it had at its last open keeps the kernel's pages
    /// (`FOPEN_KEEP_CACHE`): `grep -r` run twice reads nothing through the mount the second
    /// time. Bytes that changed in any way since (a remote change of the same size, a write
    /// through another name's rename over it, a save) are read anew.
    @Test func anUnchangedFileIsReadAgainFromTheKernelsPagesAndAChangedOneIsNot() throws {
        let mount = try MountFixture()
        defer { mount.close() }
        let path = mount.path("notes/r.json")
        let reads = { mount.fileSystem.readsAnswered.load(ordering: .relaxed) }
        let readsOf = { (body: () throws -> Void) throws -> Int in
            let before = reads()
            try body()
            return reads() - before
        }
        try remoteSave(mount, key: "r", version: 1, old: nil, new: ["v": .integer(1)])
        #expect(try eventually { try Tool.run("/bin/cat", [path]).stdout == "{\n  \"v\": 1\n}\n" })
        // Once any notice about the change has landed, a read again is the kernel's alone.
        #expect(try eventually { try readsOf { _ = try Tool.run("/bin/cat", [path]) } == 0 })
        #expect(try Tool.run("/bin/cat", [path]).stdout == "{\n  \"v\": 1\n}\n")

        // A change from elsewhere of the same length: the new bytes, read through the mount.
        try remoteSave(mount, key: "r", version: 2, old: ["v": .integer(1)], new: ["v": .integer(2)])
        #expect(try eventually { try Tool.run("/bin/cat", [path]).stdout == "{\n  \"v\": 2\n}\n" })
        #expect(try eventually { try readsOf { _ = try Tool.run("/bin/cat", [path]) } == 0 })

        // Saved here through another descriptor, then renamed over by an editor's save: each
        // time the file shows what was written, and once unchanged, the kernel's pages again.
        try Tool.shell("printf '{\"v\": 3}' > notes/r.json", in: mount.mountPoint)
        #expect(try Tool.run("/bin/cat", [path]).stdout == #"{"v": 3}"#)
        try Tool.shell("printf '{\"v\": 4}' > notes/r.tmp && mv notes/r.tmp notes/r.json", in: mount.mountPoint)
        #expect(try Tool.run("/bin/cat", [path]).stdout == #"{"v": 4}"#)
        #expect(try eventually { try readsOf { _ = try Tool.run("/bin/cat", [path]) } == 0 })
        #expect(try Tool.run("/bin/cat", [path]).stdout == #"{"v": 4}"#)

        // And a change from elsewhere to another field, merged with the edit here: read anew.
        try remoteSave(mount, key: "r", version: 3, old: ["v": .integer(2)], new: ["v": .integer(2), "w": .integer(1)])
        #expect(try eventually { try Tool.run("/bin/cat", [path]).stdout == "{\n  \"v\": 4,\n  \"w\": 1\n}\n" })
    }

    @Test func openCleanFileSeesRemoteChangeOnNextRead() throws {
        let mount = try MountFixture()
        defer { mount.close() }
        try remoteSave(mount, key: "o", version: 1, old: nil, new: ["v": .integer(1)])
        let descriptor = open(mount.path("notes/o.json"), O_RDONLY)
        #expect(descriptor >= 0)
        defer { close(descriptor) }
        func readAll() -> String {
            var buffer = [UInt8](repeating: 0, count: 4096)
            let count = pread(descriptor, &buffer, buffer.count, 0)
            return String(decoding: buffer.prefix(max(count, 0)), as: UTF8.self)
        }
        #expect(readAll() == "{\n  \"v\": 1\n}\n")
        try remoteSave(mount, key: "o", version: 2, old: ["v": .integer(1)], new: ["v": .integer(22)])
        #expect(eventually { readAll() == "{\n  \"v\": 22\n}\n" })
    }

    /// Opens `path` for writing without changing it (the kernel holds its inode from now on).
    func openForWriting(_ path: String) -> Int32 {
        let descriptor = open(path, O_WRONLY)
        #expect(descriptor >= 0, "open \(path): errno \(errno)")
        return descriptor
    }

    /// Replaces what `descriptor`'s file holds with `text` and closes it (the save).
    func rewriteAndClose(_ descriptor: Int32, _ text: String) {
        #expect(ftruncate(descriptor, 0) == 0, "ftruncate: errno \(errno)")
        let written = Array(text.utf8).withUnsafeBytes { pwrite(descriptor, $0.baseAddress, $0.count, 0) }
        #expect(written == text.utf8.count, "pwrite: errno \(errno)")
        #expect(close(descriptor) == 0, "close: errno \(errno)")
    }

    func value(_ mount: MountFixture, _ name: String) -> JSONObject? {
        guard let data = FileManager.default.contents(atPath: mount.path("notes/\(name)")) else { return nil }
        guard case .object(let object)? = try? JSONValue(parsing: [UInt8](data)) else { return nil }
        return object
    }

    /// A file open for writing when a removal from elsewhere comes, written after it: the edit
    /// wins over the removal, as one written before it came does. The file is there again with
    /// what was written, and the store has it to send as a new note.
    @Test func bytesWrittenAfterARemovalFromElsewhereMakeTheFileAgain() throws {
        let mount = try MountFixture()
        defer { mount.close() }
        try remoteSave(mount, key: "w", version: 1, old: nil, new: ["v": .integer(1)])
        let path = mount.path("notes/w.json")
        let descriptor = openForWriting(path)
        let removal = RemoteChange(key: "w", operation: .remove, sourceVersion: 1, endVersion: 2, cv: "cv-w-2")
        _ = try mount.store.applyRemote(bucket: "notes", changes: [removal])
        #expect(eventually { !FileManager.default.fileExists(atPath: path) })
        rewriteAndClose(descriptor, "{\"mine\": 1}\n")
        #expect(eventually { value(mount, "w.json") == ["mine": .integer(1)] })
        #expect(try mount.store.entity(bucket: "notes", key: "w")?.value == ["mine": .integer(1)])
    }

    /// A file open (clean) when a change from elsewhere edits it and then a removal from
    /// elsewhere takes its name: the descriptor reads the last bytes the name showed, and what
    /// is written through it makes the file again. The edit used to leave the working copy to be
    /// read again at its next use, which the removal left nothing to read from: ftruncate and
    /// pwrite answered ENOENT (seen once beside the model test, under load).
    @Test func aDescriptorOpenOnANoteEditedThenRemovedFromElsewhereKeepsItsBytesAndItsWrites() throws {
        let mount = try MountFixture()
        defer { mount.close() }
        try remoteSave(mount, key: "e", version: 1, old: nil, new: ["v": .integer(1)])
        let path = mount.path("notes/e.json")
        let descriptor = open(path, O_RDWR)
        #expect(descriptor >= 0, "open \(path): errno \(errno)")
        try remoteSave(mount, key: "e", version: 2, old: ["v": .integer(1)], new: ["v": .integer(22_222)])
        let edited = "{\n  \"v\": 22222\n}\n"
        // Waited for by its size: a read through the name would load the bytes anew itself.
        #expect(eventually {
            var now = stat()
            return lstat(path, &now) == 0 && now.st_size == edited.utf8.count
        })
        _ = try mount.store.applyRemote(
            bucket: "notes", changes: [RemoteChange(key: "e", operation: .remove, sourceVersion: 2, endVersion: 3, cv: "cv-e-3")])
        #expect(eventually { !FileManager.default.fileExists(atPath: path) })
        var buffer = [UInt8](repeating: 0, count: 4096)
        let count = pread(descriptor, &buffer, buffer.count, 0)
        #expect(String(decoding: buffer.prefix(max(count, 0)), as: UTF8.self) == edited, "pread: errno \(errno)")
        rewriteAndClose(descriptor, "{\"mine\": 3}\n")
        #expect(eventually { value(mount, "e.json") == ["mine": .integer(3)] })
        #expect(try mount.store.entity(bucket: "notes", key: "e")?.value == ["mine": .integer(3)])
    }

    /// A file open for writing when a change from elsewhere puts another inode under its name
    /// (the note removed and made again, in one message): what is written through the old
    /// descriptor goes to the note under the name, and a rename of the name the kernel still
    /// holds for the old inode moves that note.
    @Test func theOldInodeOfANameAChangeFromElsewhereReplacedMeansTheNewFile() throws {
        let mount = try MountFixture()
        defer { mount.close() }
        try remoteSave(mount, key: "x", version: 1, old: nil, new: ["v": .integer(1)])
        let path = mount.path("notes/x.json")
        let descriptor = openForWriting(path)
        var before = stat()
        #expect(fstat(descriptor, &before) == 0)
        let again = RemoteChange(
            key: "x", operation: .modify(diff: ["v": .object(["o": .string("+"), "v": .integer(3)])]), sourceVersion: nil,
            endVersion: 3, cv: "cv-x-3")
        _ = try mount.store.applyRemote(
            bucket: "notes",
            changes: [RemoteChange(key: "x", operation: .remove, sourceVersion: 1, endVersion: 2, cv: "cv-x-2"), again])
        #expect(eventually {
            var now = stat()
            return stat(path, &now) == 0 && now.st_ino != before.st_ino
        })
        rewriteAndClose(descriptor, "{\"mine\": 2}\n")
        #expect(eventually { value(mount, "x.json") == ["mine": .integer(2)] })
        #expect(try mount.store.entity(bucket: "notes", key: "x")?.value == ["mine": .integer(2)])
    }
}
