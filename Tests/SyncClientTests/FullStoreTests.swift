import ChildProcesses
import Foundation
import JSONDiff
import SyncStore
import Testing
@testable import SyncClient

/// A client whose store cannot take what the server sends (its disk is full).
@Suite("a store that cannot take what the server sends", .serialized, .timeLimit(.minutes(2)))
struct FullStoreTests {
    /// Changes that arrive while the disk is full are not skipped: the client stops taking them
    /// and, once there is room, fetches them again from the last change version it stored.
    @Test func changesTheStoreCouldNotTakeArriveOnceThereIsRoom() async throws {
        let disk = try TemporaryDirectory()
        defer { disk.remove() }
        let mounted = try run("/usr/bin/mount", ["-t", "tmpfs", "-o", "size=4m", "tmpfs", disk.path])
        try #require(mounted == 0, "cannot mount a small tmpfs at \(disk.path)")
        defer { _ = try? run("/usr/bin/umount", [disk.path]) }

        try await SyncFixture.run { fixture in
            let a = try await fixture.client("a", storeIn: disk)
            let b = try await fixture.client("b")
            await a.client.start()
            await b.client.start()
            try await a.idle()
            try await b.idle()
            let states = a.client.connectionStates()

            // Leave ~150 KB: far from enough for a 900 KB document (data, ghost, file, WAL).
            var volume = statvfs()
            #expect(statvfs(disk.path, &volume) == 0)
            let free = Int(volume.f_bavail) * Int(volume.f_frsize)
            try Data(count: max(free - 150_000, 0)).write(to: URL(fileURLWithPath: disk.file("filler")))

            let big: JSONObject = ["text": .string(String(repeating: "x", count: 900_000))]
            _ = try await b.client.save(bucket: "notes", key: "big", value: big)
            try await b.idle()
            // A hang guard: on a loaded machine the 900 KB change took over 10 s to reach a.
            let reason = try? await withTimeout(.seconds(60)) { () async -> String? in
                for await state in states {
                    if case .offline(_, _, let reason) = state, reason.hasPrefix("store error") { return reason }
                }
                return nil
            }
            #expect(reason?.contains("full") == true, "\(reason ?? "none")")
            // A later change must not carry a past the one it could not store.
            _ = try await b.client.save(bucket: "notes", key: "small", value: ["n": 1])
            try await b.idle()
            try await Task.sleep(for: .milliseconds(500))
            #expect(try a.value("big") == nil)

            try FileManager.default.removeItem(atPath: disk.file("filler"))
            #expect(try await eventually { try a.value("big") == big && a.value("small") == ["n": 1] })
        }
    }

    private func run(_ executable: String, _ arguments: [String]) throws -> Int32 {
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        try process.run()
        process.waitUntilExit()
        return process.terminationStatus
    }
}
