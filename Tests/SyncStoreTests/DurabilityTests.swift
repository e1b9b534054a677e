import ChildProcesses
import Foundation
import JSONDiff
import Testing
@testable import SyncStore

@Suite("durability and stable ids", .timeLimit(.minutes(2)))
struct DurabilityTests {
    /// A write whose body fails leaves nothing of it, and the writer goes on (the store's own
    /// BEGIN and COMMIT, not GRDB's `inTransaction`).
    @Test func aWriteThatFailsLeavesNothingAndTheNextGoesOn() throws {
        struct Failure: Error {}
        try withStore { store, _ in
            func probes() throws -> Int? {
                try store.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM meta WHERE name LIKE 'probe%'") }
            }
            #expect(throws: StoreError.self) {
                try store.write { db in
                    try db.execute(sql: "INSERT INTO meta (name, value) VALUES ('probe', 1)")
                    throw Failure()
                }
            }
            #expect(try probes() == 0)
            // A failing statement inside the body, the body's error caught by the write.
            #expect(throws: StoreError.self) {
                try store.write { db in
                    try db.execute(sql: "INSERT INTO meta (name, value) VALUES ('probe', 1)")
                    try db.execute(sql: "INSERT INTO meta (name, value) VALUES ('probe', 2)")  // the same primary key
                }
            }
            #expect(try probes() == 0)
            try store.write { db in try db.execute(sql: "INSERT INTO meta (name, value) VALUES ('probe2', 2)") }
            #expect(try probes() == 1)
        }
    }

    @Test func everythingSurvivesReopen() throws {
        let directory = try TemporaryDirectory()
        defer { directory.cleanup() }
        var expected: [EntityInfo] = []
        var ccid = ""
        do {
            let store = try SyncStore(path: directory.storePath)
            _ = try store.ensureBucket("notes")
            _ = try seed(store, key: "synced", version: 2, data: ["a": 1])
            ccid = try #require(try store.saveLocal(bucket: "notes", key: "edited", value: ["b": 2]).readyToSend).ccid
            try store.markSent(ccids: [ccid])
            _ = try store.saveLocal(bucket: "notes", key: "bad", bytes: bytes("not json"))
            _ = try store.writeLocalFile(bucket: "notes", name: ".x.swp", bytes: [9, 9])
            expected = try ["synced", "edited", "bad"].map { try #require(try store.entity(bucket: "notes", key: $0)) }
            try store.close()
        }
        let reopened = try SyncStore(path: directory.storePath)
        defer { try? reopened.close() }
        for entity in expected {
            #expect(try reopened.entity(bucket: "notes", key: entity.key) == entity)
        }
        // The sent change is resent with the same ccid after a restart.
        #expect(try reopened.outgoingChanges(bucket: "notes").map(\.ccid) == [ccid])
        #expect(try reopened.outgoingChanges(bucket: "notes").first?.state == .sent)
        #expect(try reopened.localFile(bucket: "notes", name: ".x.swp")?.content == [9, 9])
    }

    @Test func idsAreUniqueAcrossKindsAndNeverReused() throws {
        try withStore { store, directory in
            let bucket = try #require(try store.bucket(named: "notes"))
            _ = try store.saveLocal(bucket: "notes", key: "a", value: [:])
            let a = try #require(try store.lookup(bucket: "notes", name: .entity(key: "a"))).id
            let file = try store.writeLocalFile(bucket: "notes", name: "f~", bytes: []).id
            #expect(Set([bucket.id, a, file]).count == 3)
            _ = try store.deleteLocal(bucket: "notes", key: "a")
            _ = try store.saveLocal(bucket: "notes", key: "a", value: [:])
            let again = try #require(try store.lookup(bucket: "notes", name: .entity(key: "a"))).id
            #expect(again > file)
            #expect(bucket.id >= 2)  // 1 is the mount root
            if case .entity(let info)? = try store.node(id: again) {
                #expect(info.key == "a")
            } else {
                Issue.record("node(id:) did not find the entity")
            }
            #expect(try store.node(id: a) == nil)
        }
    }

    @Test func timesAreStableAcrossReopen() throws {
        let directory = try TemporaryDirectory()
        defer { directory.cleanup() }
        let store = try SyncStore(path: directory.storePath)
        _ = try store.ensureBucket("notes")
        _ = try store.saveLocal(bucket: "notes", key: "a", value: ["x": 1])
        let before = try #require(try store.lookup(bucket: "notes", name: .entity(key: "a")))
        try store.close()
        let reopened = try SyncStore(path: directory.storePath)
        defer { try? reopened.close() }
        #expect(try reopened.lookup(bucket: "notes", name: .entity(key: "a")) == before)
    }

    @Test func unclosedStoreLosesNoReturnedSave() throws {
        let directory = try TemporaryDirectory()
        defer { directory.cleanup() }
        do {
            let store = try SyncStore(path: directory.storePath)
            _ = try store.ensureBucket("notes")
            for index in 0..<50 {
                _ = try store.saveLocal(bucket: "notes", key: "k\(index)", bytes: bytes("{\"i\": \(index)}"))
            }
            // Not closed: the WAL is not checkpointed; a second connection must still see it all.
            let second = try SyncStore(path: directory.storePath)
            #expect(try second.entries(bucket: "notes").count == 50)
            try second.close()
            _ = store
        }
    }

    /// The mount's edits are deferred until an fsync asks for them; a change never goes on the
    /// wire resting on one (marking it sent syncs first).
    @Test func deferredWritesWaitForASyncAndNeverForTheWire() throws {
        try withStore { store, _ in
            #expect(!store.hasUnsyncedWrites)
            let saved = try store.saveLocal(bucket: "notes", key: "a", bytes: bytes("{\"a\": 1}"), durability: .deferred)
            #expect(store.hasUnsyncedWrites)
            try store.syncDeferredWrites()
            #expect(!store.hasUnsyncedWrites)

            _ = try store.writeLocalFile(bucket: "notes", name: ".a.json.tmp", bytes: bytes("{\"a\": 2}"), durability: .deferred)
            _ = try store.rename(bucket: "notes", from: .localFile(name: ".a.json.tmp"), to: .entity(key: "a"), durability: .deferred)
            #expect(store.hasUnsyncedWrites)
            let change = try #require(saved.readyToSend)
            try store.markSent(ccids: [change.ccid])
            #expect(!store.hasUnsyncedWrites)

            // A synced write covers the deferred ones before it (the WAL is ordered).
            _ = try store.deleteLocal(bucket: "notes", key: "a", durability: .deferred)
            #expect(store.hasUnsyncedWrites)
            _ = try store.saveLocal(bucket: "notes", key: "b", bytes: bytes("{}"))
            #expect(!store.hasUnsyncedWrites)
            try store.syncDeferredWrites()  // nothing left to sync: no write at all
            #expect(try store.readEntity(bucket: "notes", key: "a") == nil)
        }
    }

    /// A child process saves in a loop (deferred and synced saves in turn) and reports each
    /// save after the call returned; it is killed with SIGKILL; every reported save must be in
    /// the reopened store: a deferred write is in the OS's hands when the call returns.
    @Test func sigkillMidSaveLoopLosesNoReturnedSave() throws {
        if let path = ProcessInfo.processInfo.environment[childStoreVariable] {
            try runChildSaveLoop(path: path)
            return
        }
        guard let executable = testExecutable() else {
            Issue.record("cannot find the test executable to run the child process")
            return
        }
        let directory = try TemporaryDirectory()
        defer { directory.cleanup() }
        do {
            let store = try SyncStore(path: directory.storePath)
            _ = try store.ensureBucket("notes")
            try store.close()
        }
        let child = ChildProcess()
        child.executableURL = URL(fileURLWithPath: executable)
        child.arguments = ["--testing-library", "swift-testing", "--filter", "sigkillMidSaveLoopLosesNoReturnedSave"]
        var environment = ProcessInfo.processInfo.environment
        environment[childStoreVariable] = directory.storePath
        child.environment = environment
        let pipe = Pipe()
        child.standardOutput = pipe
        child.standardError = FileHandle.nullDevice
        try child.run()
        defer { if child.isRunning { kill(child.processIdentifier, SIGKILL) } }
        var reported = Set<Int>()
        var buffer = Data()
        let deadline = Date().addingTimeInterval(60)
        while reported.count < 200 && Date() < deadline {
            let chunk = pipe.fileHandleForReading.availableData
            if chunk.isEmpty { break }
            buffer.append(chunk)
            while let newline = buffer.firstIndex(of: 0x0A) {
                let line = String(decoding: buffer[buffer.startIndex..<newline], as: UTF8.self)
                buffer.removeSubrange(buffer.startIndex...newline)
                if line.hasPrefix("saved "), let index = Int(line.dropFirst(6)) { reported.insert(index) }
            }
        }
        kill(child.processIdentifier, SIGKILL)
        child.waitUntilExit()
        #expect(child.terminationReason == .uncaughtSignal)
        #expect(reported.count >= 50)
        let store = try SyncStore(path: directory.storePath)
        defer { try? store.close() }
        for index in reported {
            #expect(try store.readEntity(bucket: "notes", key: "k\(index)") == bytes("{\"i\": \(index)}"))
        }
        #expect(try store.outgoingChanges(bucket: "notes").count >= reported.count)
    }
}

private let childStoreVariable = "SYNCSTORE_CHILD_STORE"

private func runChildSaveLoop(path: String) throws {
    let store = try SyncStore(path: path)
    for index in 0..<100_000 {
        _ = try store.saveLocal(
            bucket: "notes", key: "k\(index)", bytes: bytes("{\"i\": \(index)}"),
            durability: index.isMultiple(of: 2) ? .deferred : .synced)
        let line = "saved \(index)\n"
        _ = line.withCString { write(STDOUT_FILENO, $0, strlen($0)) }
    }
}

/// The running test bundle (the process re-executes itself to get a killable child).
private func testExecutable() -> String? {
    let path = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().path
    return FileManager.default.isExecutableFile(atPath: path) ? path : nil
}
