import BucketFS
import ChildProcesses
import Foundation
import JSONDiff
import SyncStore
import Testing

/// Issue 13, "Files up to that limit (at least 1 GiB for scratch files) work with memory that does
/// not grow with file size, and one file's long save never blocks requests for other files", on
/// a real mount served by this process (so its own peak memory is the mount's).
@Suite(.serialized, .timeLimit(.minutes(Patience.testMinutes)))
struct LargeFileTests {
    /// Peak resident memory of this process (VmHWM), in bytes.
    static func peakMemory() throws -> Int {
        let status = try String(contentsOfFile: "/proc/self/status", encoding: .utf8)
        guard let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmHWM:") }),
            let kilobytes = Int(line.split(separator: " ").dropFirst().first ?? "")
        else { throw CocoaError(.fileReadCorruptFile) }
        return kilobytes << 10
    }

    /// Starts the peak over from the current resident size (clear_refs 5, Linux >= 4.0).
    static func resetPeakMemory() throws {
        try "5".write(toFile: "/proc/self/clear_refs", atomically: false, encoding: .utf8)
    }

    /// Starts a Python script in `dir` whose printed lines the test reads as they come.
    static func startScript(_ script: String, in dir: String, arguments: [String] = []) throws -> (process: ChildProcess, output: FileHandle) {
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        process.currentDirectoryURL = URL(fileURLWithPath: dir)
        process.arguments = ["-c", script] + arguments
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        return (process, output.fileHandleForReading)
    }

    @Test func aGigabyteScratchFileIsSavedStreamedAndReadBackWithoutHoldingItInMemory() throws {
        let mount = try MountFixture()
        defer { mount.close() }
        let dir = mount.path("notes")
        try Tool.shell("echo '{\"keep\": 1}' > keep.json", in: dir)
        try Self.resetPeakMemory()
        // 1 GiB of distinct MiBs (a counter in each), written 1 MiB per write; "closing" is
        // printed just before close(2), which returns once the file is in the store.
        let (writer, output) = try Self.startScript(
            """
            import hashlib, os, sys, time
            pool = os.urandom(17 << 20)
            digest = hashlib.sha256()
            fd = os.open('big.tmp', os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            for i in range(1024):
                block = i.to_bytes(8, 'little') + pool[i * 16384:i * 16384 + (1 << 20) - 8]
                digest.update(block)
                os.write(fd, block)
            print('closing', flush=True)
            start = time.monotonic()
            os.close(fd)
            print('closed %.3f %s' % (time.monotonic() - start, digest.hexdigest()), flush=True)
            """, in: dir)
        defer { if writer.isRunning { writer.terminate() } }
        var lines = LineReader(output)
        #expect(lines.next() == "closing")
        // While the big file's save runs: a small file is created, written and saved, others
        // are listed, stat'ed and read. None waits for the big save.
        let saveStarted = Date()
        let small = try Tool.shell(
            "echo small > small.tmp && stat -c %s big.tmp small.tmp && ls && cat keep.json", in: dir)
        let smallDone = Date().timeIntervalSince(saveStarted)
        let closed = lines.next() ?? ""
        writer.waitUntilExit()
        let parts = closed.split(separator: " ")
        #expect(parts.count == 3 && parts[0] == "closed", "writer: \(closed)")
        guard parts.count == 3, let closeSeconds = Double(parts[1]) else { return }
        let digest = String(parts[2])
        #expect(small.stdout.contains("small.tmp") && small.stdout.contains("{\"keep\": 1}"), "\(small.stdout)")
        // The small requests finished while the big close was still saving.
        #expect(smallDone < closeSeconds, "small requests took \(smallDone) s, the big close \(closeSeconds) s")
        #expect(try FileManager.default.attributesOfItem(atPath: dir + "/big.tmp")[.size] as? Int == 1 << 30)
        // Read back through a fresh mount: the bytes are the store's, ranged reads of its chunks.
        try mount.remount()
        let sum = try Tool.shell("sha256sum big.tmp", in: dir)
        #expect(sum.stdout.hasPrefix(digest), "read back \(sum.stdout), wrote \(digest)")
        #expect(try Tool.run("/bin/cat", ["small.tmp"], directory: dir).stdout == "small\n")
        // Writing, saving and reading a GiB never held it in memory (the old design held the
        // whole file, and a copy of it at the save).
        let peak = try Self.peakMemory()
        #expect(peak < 384 << 20, "peak memory \(peak >> 20) MiB while handling a 1 GiB file")
        // A rename to another scratch name moves the row, not the bytes; an unlink frees them.
        try Tool.shell("mv big.tmp moved.tmp", in: dir)
        #expect(try mount.store.localFileContent(bucket: "notes", name: "moved.tmp").map(Self.isChunked) == true)
        // Cut, by path (truncate(2)) and through a descriptor (coreutils' truncate: open and
        // ftruncate), the GiB is neither read nor copied: the store takes the kept bytes, and
        // the old chunks go to the reclaimer (scripts/bench-big-files times what other files'
        // requests wait meanwhile).
        try Self.resetPeakMemory()
        let cut = try Tool.python(
            """
            import os
            os.truncate('moved.tmp', (3 << 20) + 5)
            fd = os.open('moved.tmp', os.O_WRONLY)
            os.ftruncate(fd, 7)
            os.close(fd)
            print(os.stat('moved.tmp').st_size, open('moved.tmp', 'rb').read().hex())
            """, in: dir)
        // The file began with MiB 0's counter: eight zero bytes.
        #expect(cut.stdout == "7 00000000000000\n", "\(cut.stdout) \(cut.stderr)")
        #expect(try mount.store.localFile(bucket: "notes", name: "moved.tmp")?.content.count == 7)
        #expect(try eventually { !mount.store.hasUnusedChunks }, "the cut file's chunks were never reclaimed")
        #expect(try Self.peakMemory() < 384 << 20)
        try Tool.shell("rm moved.tmp", in: dir)
    }

    /// A rename (or chmod) of a large file still open with unsaved writes saves it first; its
    /// bytes stream to the store as a close's do, so other files' saves do not wait for them.
    @Test func aRenameOfALargeUnsavedFileDoesNotHoldUpOtherSaves() throws {
        let mount = try MountFixture()
        defer { mount.close() }
        let dir = mount.path("notes")
        try FileManager.default.createDirectory(atPath: mount.path("other"), withIntermediateDirectories: false)
        let (writer, output) = try Self.startScript(
            """
            import hashlib, os, time
            pool = os.urandom(9 << 20)
            digest = hashlib.sha256()
            fd = os.open('big.tmp', os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            def write(i):
                block = i.to_bytes(8, 'little') + pool[i * 16384:i * 16384 + (1 << 20) - 8]
                digest.update(block)
                os.write(fd, block)
            for i in range(512):
                write(i)
            print('renaming', flush=True)
            start = time.monotonic()
            os.rename('big.tmp', 'moved.tmp')
            seconds = time.monotonic() - start
            write(512)
            os.chmod('moved.tmp', 0o600)
            print('renamed %.3f %s' % (seconds, digest.hexdigest()), flush=True)
            os.close(fd)
            """, in: dir)
        defer { if writer.isRunning { writer.terminate() } }
        var lines = LineReader(output)
        #expect(lines.next() == "renaming")
        // In another bucket: the kernel holds a directory's lock through a rename in it.
        let started = Date()
        try Tool.shell("echo small > small.tmp && echo '{}' > small.json", in: mount.path("other"))
        let smallDone = Date().timeIntervalSince(started)
        let renamed = lines.next() ?? ""
        writer.waitUntilExit()
        let parts = renamed.split(separator: " ")
        #expect(parts.count == 3 && parts[0] == "renamed", "writer: \(renamed)")
        guard parts.count == 3, let renameSeconds = Double(parts[1]) else { return }
        #expect(smallDone < renameSeconds, "small saves took \(smallDone) s, the rename \(renameSeconds) s")
        try mount.remount()
        #expect(try Tool.shell("sha256sum moved.tmp", in: dir).stdout.hasPrefix(String(parts[2])))
        #expect(try Tool.shell("stat -c %a moved.tmp", in: dir).stdout == "600\n")
        #expect(!FileManager.default.fileExists(atPath: dir + "/big.tmp"))
        #expect(try Tool.run("/bin/cat", ["small.tmp"], directory: mount.path("other")).stdout == "small\n")
    }

    @Test func aStoredLargeFileIsChangedInPlaceTruncatedAndRenamedOntoAnEntity() throws {
        let mount = try MountFixture()
        defer { mount.close() }
        let dir = mount.path("notes")
        // Each step on a closed file opens it read from the store's chunks, then changes it.
        let script = """
            import hashlib, json, os
            data = bytearray(os.urandom(8 << 20))
            with open('m.tmp', 'wb') as f: f.write(data)
            fd = os.open('m.tmp', os.O_RDWR)
            os.pwrite(fd, b'XYZ', (5 << 20) + 7)
            data[(5 << 20) + 7:(5 << 20) + 10] = b'XYZ'
            os.close(fd)
            fd = os.open('m.tmp', os.O_RDWR)
            os.ftruncate(fd, (6 << 20) + 3)
            del data[(6 << 20) + 3:]
            os.close(fd)
            with open('m.tmp', 'rb') as f: print(f.read() == data)
            doc = {'text': 'x' * (2 << 20)}
            with open('doc.tmp', 'w') as f: json.dump(doc, f)
            os.rename('doc.tmp', 'doc.json')
            with open('doc.json') as f: print(json.load(f) == doc)
            print(hashlib.sha256(data).hexdigest())
            """
        let output = try Tool.python(script, in: dir)
        let lines = output.stdout.split(separator: "\n")
        #expect(lines.count == 3 && lines[0] == "True" && lines[1] == "True", "\(output.stdout) \(output.stderr)")
        guard lines.count == 3 else { return }
        try mount.remount()
        #expect(try Tool.shell("sha256sum m.tmp", in: dir).stdout.hasPrefix(String(lines[2])))
        #expect(try Tool.shell("stat -c %s doc.json", in: dir).stdout == "\((2 << 20) + 12)\n")
    }

    /// The working copies of large open files this process's mount holds (unlinked temporary
    /// files on the store's disk: `SpillFile`).
    static func workingCopiesOnDisk() -> Int {
        let descriptors = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
        return descriptors.filter { descriptor in
            (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/" + descriptor))?
                .contains("/.bucketfs-working-") == true
        }.count
    }

    /// An entity file written past 1 MiB keeps its working copy on disk, as a scratch file
    /// does: in memory it grew by doubling and stayed while the store took its save (issue 37).
    /// Writes in the middle, reads of it while open, a truncate and the save all see one file.
    @Test func aLargeEntityFilesWorkingCopyIsOnDiskNotInMemory() throws {
        let mount = try MountFixture()
        defer { mount.close() }
        let dir = mount.path("notes")
        #expect(Self.workingCopiesOnDisk() == 0)
        let go = FileManager.default.temporaryDirectory.appendingPathComponent("bucketfs-test-go-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: go) }
        let (writer, output) = try Self.startScript(
            """
            import os, sys, time
            fd = os.open('big.json', os.O_RDWR | os.O_CREAT | os.O_TRUNC)
            os.write(fd, b'{"s": "')
            for i in range(6):
                os.write(fd, bytes([ord('a') + i]) * (1 << 20))
            os.write(fd, b'"}')
            os.pwrite(fd, b'XYZ', (3 << 20) + 7)
            print('written', flush=True)
            while not os.path.exists(sys.argv[1]): time.sleep(0.01)
            middle = os.pread(fd, 5, (3 << 20) + 5)
            os.ftruncate(fd, (5 << 20) + 7)
            os.lseek(fd, 0, os.SEEK_END)
            os.write(fd, b'"}')
            os.close(fd)
            print(middle.decode(), flush=True)
            """, in: dir, arguments: [go])
        defer { if writer.isRunning { writer.terminate() } }
        var lines = LineReader(output)
        #expect(lines.next() == "written")
        #expect(Self.workingCopiesOnDisk() == 1, "the 6 MiB note's working copy is not on disk")
        #expect(FileManager.default.createFile(atPath: go, contents: nil))
        #expect(lines.next() == "ccXYZ")
        writer.waitUntilExit()
        let text = String(repeating: "a", count: 1 << 20) + String(repeating: "b", count: 1 << 20)
            + String(repeating: "c", count: 1 << 20) + "XYZ" + String(repeating: "d", count: (1 << 20) - 3)
            + String(repeating: "e", count: 1 << 20)
        // The store takes the save from the journal and parses a note this large afterwards.
        let expected: JSONObject = ["s": .string(text)]
        #expect(try eventually { try mount.store.entity(bucket: "notes", key: "big")?.value == expected })
        // Closed and saved, the working copy goes.
        #expect(eventually { Self.workingCopiesOnDisk() == 0 })
    }

    static func isChunked(_ content: LocalFileContent) -> Bool {
        if case .chunked = content { return true }
        return false
    }

    @Test func theLimitsAreFourGiBForScratchFilesAnd16MiBForEntityFiles() throws {
        let mount = try MountFixture()
        defer { mount.close() }
        let dir = mount.path("notes")
        try Tool.shell("echo '{}' > keep.json", in: dir)
        // Up to the limit: a sparse file, which costs neither memory nor disk.
        let sparse = try Tool.python(
            """
            import os
            fd = os.open('sparse.tmp', os.O_RDWR | os.O_CREAT)
            os.pwrite(fd, b'end', (4 << 30) - 3)
            os.close(fd)
            print(os.stat('sparse.tmp').st_size)
            with open('sparse.tmp', 'rb') as f:
                f.seek((4 << 30) - 5)
                print(f.read())
            """, in: dir)
        #expect(sparse.stdout == "4294967296\nb'\\x00\\x00end'\n", "\(sparse.stdout)")
        try DescriptorAndLimitTests.expectErrno("EFBIG", "os.truncate('sparse.tmp', (4 << 30) + 1)", in: dir)
        try DescriptorAndLimitTests.expectErrno(
            "EFBIG", "fd = os.open('sparse.tmp', os.O_WRONLY); os.pwrite(fd, b'x', 4 << 30)", in: dir)
        // A closed scratch file is truncated in the store, without reading it.
        #expect(try Tool.python("import os; os.truncate('sparse.tmp', 5); print(open('sparse.tmp', 'rb').read())", in: dir)
            .stdout == "b'\\x00\\x00\\x00\\x00\\x00'\n")
        // Entity files stop at 16 MiB: the server takes 4 MiB, and the mount parses them whole.
        try DescriptorAndLimitTests.expectErrno(
            "EFBIG", "fd = os.open('big.json', os.O_WRONLY | os.O_CREAT); os.pwrite(fd, b'x', 16 << 20)", in: dir)
        try DescriptorAndLimitTests.expectErrno("EFBIG", "os.truncate('keep.json', (16 << 20) + 1)", in: dir)
        // A larger scratch file renamed onto a `.json` name: refused, and kept under its name.
        try Tool.shell("truncate -s 20M large.tmp", in: dir)
        try DescriptorAndLimitTests.expectErrno("EFBIG", "os.rename('large.tmp', 'large.json')", in: dir)
        #expect(try FileManager.default.attributesOfItem(atPath: dir + "/large.tmp")[.size] as? Int == 20 << 20)
        #expect(!FileManager.default.fileExists(atPath: dir + "/large.json"))
    }
}

/// Lines of a pipe, read as they come.
struct LineReader {
    let handle: FileHandle
    var buffer = Data()

    init(_ handle: FileHandle) {
        self.handle = handle
    }

    mutating func next() -> String? {
        while true {
            if let newline = buffer.firstIndex(of: UInt8(ascii: "\n")) {
                let line = String(decoding: buffer[buffer.startIndex..<newline], as: UTF8.self)
                buffer = Data(buffer[(newline + 1)...])
                return line
            }
            let more = handle.availableData
            if more.isEmpty { return nil }
            buffer.append(more)
        }
    }
}
