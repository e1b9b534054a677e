import Foundation
import JSONDiff
import Testing
@testable import SyncStore

/// Issue 17: fetched versions are kept for listing offline, and an entity the store forgets
/// leaves its last version behind so its history can still be found.
@Suite("version history in the store", .timeLimit(.minutes(1)))
struct VersionHistoryStoreTests {
    @Test func fetchedVersionsAreKeptAndVersionsTheServerLacksAreNot() throws {
        try withStore { store, _ in
            let accepted = Date(timeIntervalSince1970: 1_764_072_000.25)
            try store.cacheVersions(bucket: "notes", key: "k", [
                EntityVersion(version: 2, data: ["n": 2], acceptedAt: nil),
                EntityVersion(version: 1, data: ["n": 1], acceptedAt: accepted),
                EntityVersion(version: 3, data: nil, acceptedAt: nil),
            ])
            #expect(try store.cachedVersions(bucket: "notes", key: "k") == [
                EntityVersion(version: 1, data: ["n": 1], acceptedAt: accepted),
                EntityVersion(version: 2, data: ["n": 2], acceptedAt: nil),
            ])
            #expect(try store.cachedVersions(bucket: "notes", key: "other").isEmpty)
        }
    }

    @Test func anEntityRemovedOnTheServerLeavesItsLastVersion() throws {
        try withStore { store, _ in
            _ = try seed(store, key: "k", version: 4, data: ["n": 4])
            #expect(try store.lastVersionBeforeRemoval(bucket: "notes", key: "k") == nil)
            _ = try store.applyRemote(
                bucket: "notes",
                changes: [RemoteChange(key: "k", operation: .remove, sourceVersion: 4, endVersion: 5, cv: "c9", ccids: ["dd"])])
            #expect(try store.entity(bucket: "notes", key: "k") == nil)
            #expect(try store.lastVersionBeforeRemoval(bucket: "notes", key: "k") == 4)
            // An entity that never reached the server leaves nothing.
            _ = try store.saveLocal(bucket: "notes", key: "local", value: ["n": 1])
            _ = try store.deleteLocal(bucket: "notes", key: "local")
            #expect(try store.lastVersionBeforeRemoval(bucket: "notes", key: "local") == nil)
        }
    }
}
