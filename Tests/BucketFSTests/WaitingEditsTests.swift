@testable import BucketFS
import SyncStore
import Testing

/// The journaled edits the store does not have yet: taken oldest first in batches, and asked on
/// every answer from the server whether a file has one waiting. Checked against a plain array
/// over a long run of random appends and removals (the front index compacts past 4,096).
struct WaitingEditsTests {
    @Test func matchesAPlainArrayOverARandomRun() {
        var generator = SeededGenerator(seed: 16)
        var waiting = SyncStoreBackend.WaitingEdits()
        var model: [JournaledEdit] = []
        var sequence: Int64 = 0
        let buckets = ["notes", "todo"]
        for _ in 0..<4_000 {
            for _ in 0..<Int(generator.next() % 9) {
                sequence += 1
                // Local files share the entities' names: only an entity's file counts, as a
                // rename's source or destination too.
                let name = "k\(generator.next() % 40)"
                let other = "k\(generator.next() % 40)"
                let (file, change): (EntryName, JournaledEdit.Edit)
                switch generator.next() % 6 {
                case 0: (file, change) = (.entity(key: name), .remove)
                case 1: (file, change) = (.localFile(name: name), .save([1]))
                case 2: (file, change) = (.localFile(name: name), .rename(to: .entity(key: other)))
                case 3: (file, change) = (.entity(key: name), .rename(to: .entity(key: other)))
                default: (file, change) = (.entity(key: name), .save([UInt8](repeating: 1, count: Int(generator.next() % 5))))
                }
                let edit = JournaledEdit(
                    sequence: sequence, bucket: buckets[Int(generator.next() % 2)], file: file, edit: change, time: sequence)
                waiting.append(edit)
                model.append(edit)
            }
            let upTo = model.isEmpty ? 0 : model[Int(generator.next() % UInt64(model.count))].sequence
            let batch = waiting.oldestForOneTransaction(upTo: upTo)
            #expect(batch == Array(model.prefix(SyncStoreBackend.transactionLength(of: model[...], upTo: upTo))))
            waiting.removeOldest(batch.count)
            model.removeFirst(batch.count)
            #expect(waiting.isEmpty == model.isEmpty)
            #expect(waiting.savedBytes == model.reduce(0) { sum, edit in
                guard case .save(let bytes) = edit.edit else { return sum }
                return sum + bytes.count
            })
            #expect(waiting.last == model.last)
            for bucket in buckets {
                let keys: Set<String> = ["k\(generator.next() % 40)", "k\(generator.next() % 40)"]
                let expected = model.contains { edit in
                    guard edit.bucket == bucket else { return false }
                    if case .entity(let key) = edit.file, keys.contains(key) { return true }
                    if case .rename(to: .entity(let key)) = edit.edit, keys.contains(key) { return true }
                    return false
                }
                #expect(waiting.hasEdit(bucket: bucket, ofAnyOf: keys) == expected)
            }
        }
        // Emptied, every file's count goes with it.
        while !waiting.isEmpty { waiting.removeOldest(waiting.oldestForOneTransaction(upTo: .max).count) }
        #expect(waiting.isEmpty && waiting.last == nil)
        #expect(!waiting.hasEdit(bucket: "notes", ofAnyOf: Set((0..<40).map { "k\($0)" })))
    }

    /// A transaction takes at most 256 edits and 4 MiB of saved bytes, unless its first save
    /// alone is more: twelve big notes saved at once are parsed in twelve transactions, each
    /// freeing its copies when it commits, not all held in one (issue 37).
    /// An applied save lets go of its bytes at once, while later edits still wait (the array
    /// keeps its place until it is compacted): a burst of big saves that never left the list
    /// empty held every one in memory (issue 37).
    @Test func anAppliedSaveLetsGoOfItsBytesWhileOthersWait() {
        var waiting = SyncStoreBackend.WaitingEdits()
        var bytes = [UInt8](repeating: 7, count: 1 << 20)
        waiting.append(JournaledEdit(sequence: 1, bucket: "notes", key: "big", edit: .save(bytes), time: 1))
        waiting.append(JournaledEdit(sequence: 2, bucket: "notes", key: "next", edit: .save([1]), time: 2))
        waiting.removeOldest(1)
        #expect(!waiting.isEmpty && waiting.savedBytes == 1 && waiting.last?.sequence == 2)
        #expect(waiting.oldestForOneTransaction(upTo: 2).map(\.sequence) == [2])
        // Ours alone now: a write to it changes it where it is, with no copy made first.
        let before = bytes.withUnsafeBufferPointer { $0.baseAddress }
        bytes[0] = 8
        #expect(bytes.withUnsafeBufferPointer { $0.baseAddress } == before, "the applied save's bytes are still held")
    }

    @Test func aTransactionTakesAtMostFourMiBOfSavesOrOneLargerSave() {
        let mib = 1 << 20
        func save(_ sequence: Int64, _ bytes: Int) -> JournaledEdit {
            JournaledEdit(sequence: sequence, bucket: "notes", file: .entity(key: "k\(sequence)"), edit: .save([UInt8](repeating: 0, count: bytes)), time: sequence)
        }
        func remove(_ sequence: Int64) -> JournaledEdit {
            JournaledEdit(sequence: sequence, bucket: "notes", file: .entity(key: "k\(sequence)"), edit: .remove, time: sequence)
        }
        let edits = [save(1, mib), save(2, 2 * mib), remove(3), save(4, 2 * mib), save(5, 15 * mib), save(6, 10), save(7, 16 * mib)]
        var lengths: [Int] = []
        var start = 0
        while start < edits.count {
            let length = SyncStoreBackend.transactionLength(of: edits[start...])
            lengths.append(length)
            start += length
        }
        #expect(lengths == [3, 1, 1, 1, 1])
        #expect(SyncStoreBackend.transactionLength(of: edits[...], upTo: 2) == 2)
        let small = (1...600).map { save(Int64($0), 100) }
        #expect(SyncStoreBackend.transactionLength(of: small[...]) == SyncStoreBackend.editsPerTransaction)
    }

    /// Saves wait in memory for the store up to 16 MiB: a save that would keep more has the
    /// store take those waiting first, whoever else would have (twelve 14 MiB saves held
    /// 200 MiB, issue 37). The background applier is held still, so only the saver can.
    /// A large working copy about to be read into memory for its save makes that room first.
    @Test func aSaveBeyondWhatMayWaitHasTheStoreTakeTheSavesBeforeIt() throws {
        try SaveJournalMountTests.withMountedBackend { backend, store in
            backend.applier.suspend()
            defer { backend.applier.resume() }

            let small = Array(#"{"n": 1}"#.utf8)
            for index in 0..<3 { _ = try backend.save(bucket: "notes", name: .entity(key: "s\(index)"), bytes: small, newID: nil) }
            #expect(backend.savedBytesWaiting == 3 * small.count, "small saves just wait")
            let big = Array(#"{"s": "\#(String(repeating: "x", count: 10 << 20))"}"#.utf8)
            _ = try backend.save(bucket: "notes", name: .entity(key: "a"), bytes: big, newID: nil)
            #expect(backend.savedBytesWaiting == 3 * small.count + big.count, "within 16 MiB: waits")
            _ = try backend.save(bucket: "notes", name: .entity(key: "b"), bytes: big, newID: nil)
            #expect(backend.savedBytesWaiting == big.count, "those before it went to the store first")
            #expect(try store.readEntity(bucket: "notes", key: "a") == big)
            #expect(try store.readEntity(bucket: "notes", key: "s2") == small)
            #expect(try store.readEntity(bucket: "notes", key: "b") == nil)
            // Before a large working copy is read to be saved (`makeRoom`), as before its save.
            backend.makeRoom(forSaving: 1 << 20)
            #expect(backend.savedBytesWaiting == big.count, "room for 1 MiB more: nothing to do")
            backend.makeRoom(forSaving: big.count)
            #expect(backend.savedBytesWaiting == 0)
            #expect(try store.readEntity(bucket: "notes", key: "b") == big)
        }
    }
}
