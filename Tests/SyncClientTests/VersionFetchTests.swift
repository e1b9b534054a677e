import Foundation
import JSONDiff
import SyncStore
import Testing
@testable import SyncClient

/// Issue 17: `fetchVersions` asks for kept versions with `e` and hands the replies back
/// without applying them to the store.
extension DriverTests {
    @Test func fetchedVersionsAreHistoryNotReloads() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let (client, store, writer, id) = try await syncedClient(directory)
        defer { try? store.close() }
        await client.receive(#"0:c:[{"clientid":"other","id":"a","o":"M","v":{"t":{"o":"+","v":"now"}},"ev":3,"cv":"cv2","ccids":["x1"]}]"#, connectionID: id)
        #expect(try store.entity(bucket: "notes", key: "a")?.version == 3)

        let fetch = Task { try await client.fetchVersions(bucket: "notes", key: "a", versions: [1, 2]) }
        let deadline = ContinuousClock.now + .seconds(10)
        while Set(writer.written) != ["0:e:a.1", "0:e:a.2"], ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(5)) }
        #expect(Set(writer.take()) == ["0:e:a.1", "0:e:a.2"])
        await client.receive("0:e:a.2\n?", connectionID: id)
        await client.receive("0:e:a.1\n{\"data\":{\"t\":\"old\"},\"accepted_at\":100.5}", connectionID: id)
        let versions = try await fetch.value
        #expect(versions == [
            EntityVersion(version: 1, data: ["t": "old"], acceptedAt: Date(timeIntervalSince1970: 100.5)),
            EntityVersion(version: 2, data: nil, acceptedAt: nil),
        ])
        // The store still holds the newest version, and asked for nothing more.
        #expect(try store.entity(bucket: "notes", key: "a")?.value == ["t": "now"])
        #expect(try store.entity(bucket: "notes", key: "a")?.version == 3)
        #expect(writer.take().isEmpty)
    }

    @Test func aFetchFailsWhenTheConnectionCloses() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let (client, store, writer, _) = try await syncedClient(directory)
        defer { try? store.close() }
        let fetch = Task { try await client.fetchVersions(bucket: "notes", key: "a", versions: [1]) }
        let deadline = ContinuousClock.now + .seconds(10)
        while writer.written.isEmpty, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(5)) }
        _ = await client.connectionEnded()
        await #expect(throws: SyncClientError.serverUnavailable("the connection closed")) { try await fetch.value }
        // Offline: refused at once.
        await #expect(throws: SyncClientError.serverUnavailable("not connected")) {
            try await client.fetchVersions(bucket: "notes", key: "a", versions: [1])
        }
    }
}
