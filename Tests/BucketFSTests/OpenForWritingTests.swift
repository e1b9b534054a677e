import Foundation
import Synchronization
import Testing

/// The file system tells the backend (and so the sync engine) of every entity file opened to be
/// changed, before a byte is written: an Apptimist mount LOCKs it then. Reads and local-only
/// files tell nothing.
@Suite(.serialized, .timeLimit(.minutes(Patience.testMinutes)))
struct OpenForWritingTests {
    @Test func opensForWritingAndCreatesReachTheBackendReadsAndLocalFilesDoNot() throws {
        let told = Mutex<[String]>([])
        let mount = try MountFixture(onOpenedForWriting: { bucket, key in told.withLock { $0.append("\(bucket)/\(key)") } })
        defer { mount.close() }
        func opened(_ name: String, _ flags: Int32) throws -> [String] {
            told.withLock { $0 = [] }
            let fd = open(mount.path(name), flags, 0o644)
            try #require(fd >= 0, "open \(name): errno \(errno)")
            // Told before open(2) returns: the hand-off is part of the request, the LOCK is not.
            let seen = told.withLock { $0 }
            close(fd)
            return seen
        }
        #expect(try opened("notes/a.json", O_WRONLY | O_CREAT | O_TRUNC) == ["notes/a"])
        #expect(try opened("notes/a.json", O_RDONLY) == [])
        #expect(try opened("notes/a.json", O_WRONLY) == ["notes/a"])
        #expect(try opened("notes/a.json", O_RDWR) == ["notes/a"])
        #expect(try opened("notes/a.json", O_WRONLY | O_APPEND) == ["notes/a"])
        // A local-only file (an editor's scratch) is never sent: nothing to reserve.
        #expect(try opened("notes/.a.json.swp", O_WRONLY | O_CREAT) == [])
        #expect(try opened("notes/.a.json.swp", O_RDWR) == [])
    }
}
