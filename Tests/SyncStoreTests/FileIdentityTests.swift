import Foundation
import JSONDiff
import Testing
@testable import SyncStore

/// Issue 13: a file's inode number (`DirectoryEntry.id`) follows the file, and its ctime changes
/// only with the file: what backup tools and open descriptors rely on.
@Suite("file identity and times", .timeLimit(.minutes(1)))
struct FileIdentityTests {
    func id(_ store: SyncStore, _ name: EntryName) throws -> Int64? {
        try store.lookup(bucket: "notes", name: name)?.id
    }

    @Test func aRenameCarriesTheNumberBetweenEveryKindOfName() throws {
        try withStore { store, _ in
            _ = try store.saveLocal(bucket: "notes", key: "a", value: ["n": 1])
            _ = try store.saveLocal(bucket: "notes", key: "taken", value: ["n": 2])
            _ = try store.writeLocalFile(bucket: "notes", name: "taken.tmp", bytes: bytes("x"))
            let number = try #require(try id(store, .entity(key: "a")))
            let path: [EntryName] = [
                .entity(key: "b"), .localFile(name: "c.tmp"), .entity(key: "taken"), .localFile(name: "taken.tmp"),
                .localFile(name: "d.tmp"), .entity(key: "e"),
            ]
            var current = EntryName.entity(key: "a")
            for next in path {
                let renamed = try store.rename(bucket: "notes", from: current, to: next)
                #expect(renamed.destination.id == number, "\(current) -> \(next)")
                #expect(try id(store, next) == number)
                #expect(try id(store, current) == nil)
                current = next
            }
            // No other file shows the number.
            #expect(try store.entries(bucket: "notes").filter { $0.id == number }.count == 1)
        }
    }

    @Test func aKeyRemovedAndMadeAgainIsANewFile() throws {
        try withStore { store, _ in
            try seed(store, key: "k", version: 1, data: ["n": 1])
            var seen: Set<Int64> = []
            for round in 0..<4 {
                let number = try #require(try id(store, .entity(key: "k")))
                #expect(seen.insert(number).inserted, "round \(round) reused \(number)")
                // On the server: the row stays (deleted pending) until the server confirms.
                _ = try store.deleteLocal(bucket: "notes", key: "k")
                _ = try store.saveLocal(bucket: "notes", key: "k", value: ["n": .integer(Int64(round))])
            }
        }
    }

    @Test func aKeyRenamedAwayAndMadeAgainIsANewFile() throws {
        try withStore { store, _ in
            try seed(store, key: "a", version: 1, data: ["n": 1])
            let number = try #require(try id(store, .entity(key: "a")))
            // The server has "a": its row stays (deleted pending) and its file, number and all, is "b" now.
            _ = try store.rename(bucket: "notes", from: .entity(key: "a"), to: .entity(key: "b"))
            #expect(try id(store, .entity(key: "b")) == number)
            _ = try store.saveLocal(bucket: "notes", key: "a", value: ["n": 2])
            let again = try #require(try id(store, .entity(key: "a")))
            #expect(again != number)
            #expect(try store.entries(bucket: "notes").filter { $0.id == number }.count == 1)
        }
    }

    @Test func anAcknowledgementLeavesTheFileTimesAsTheyWere() throws {
        try withStore { store, _ in
            let saved = try store.saveLocal(bucket: "notes", key: "a", value: ["n": 1])
            let change = try #require(saved.readyToSend)
            try store.markSent(ccids: [change.ccid])
            let before = try #require(try store.lookup(bucket: "notes", name: .entity(key: "a")))
            Thread.sleep(forTimeInterval: 0.01)
            let ack = RemoteChange(
                key: "a", operation: .modify(diff: wireDiff([:], ["n": 1])), sourceVersion: nil, endVersion: 1,
                cv: "cv1", ccids: [change.ccid])
            _ = try store.applyRemote(bucket: "notes", changes: [ack])
            #expect(try store.entity(bucket: "notes", key: "a")?.state == .synced)
            #expect(try store.lookup(bucket: "notes", name: .entity(key: "a")) == before)
            // A refusal changes the state, not the file.
            let next = try #require(try store.saveLocal(bucket: "notes", key: "a", value: ["n": 2]).readyToSend)
            let edited = try #require(try store.lookup(bucket: "notes", name: .entity(key: "a")))
            Thread.sleep(forTimeInterval: 0.01)
            _ = try store.reject(bucket: "notes", ccid: next.ccid, code: 400)
            #expect(try store.lookup(bucket: "notes", name: .entity(key: "a")) == edited)
        }
    }
}
