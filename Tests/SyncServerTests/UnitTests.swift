import Foundation
import JSONDiff
import SyncProtocol
@testable import SyncServer
import Testing

struct ChangeSequenceTests {
    @Test func rendersTwentyFourHexDigitsInCounterOrder() {
        #expect(ChangeSequence.render(0, tag: 0, history: 0) == "000000000000000000000000")
        #expect(ChangeSequence.render(255, tag: 0xabc, history: 0) == "0000000000ff000000000abc")
        let values: [Int64] = [1, 9, 10, 255, 4096, 1 << 40, ChangeSequence.maxCounter]
        let tags: [UInt64] = [0xffff_ffff_ffff, 0, 7, 0x1234_5678_9abc, 1, 0xffff_ffff_ffff, 42]
        for history: UInt64 in [0, 0x5a5a_0f0f_1234] {
            let rendered = zip(values, tags).map { ChangeSequence.render($0, tag: $1, history: history) }
            #expect(rendered.allSatisfy { $0.utf8.count == 24 })
            #expect(rendered == rendered.sorted())
            let parsed = rendered.compactMap { ChangeSequence.parse($0, history: history) }
            #expect(parsed.map(\.counter) == values)
            #expect(parsed.map(\.tag) == tags)
        }
    }

    /// A restored database serves another history: the cv of the same change there is another
    /// cv, and one handed out in the history before reads as another change's tag.
    @Test func aHistoryNumberChangesEveryCVOnTheWire() {
        let tag = ChangeSequence.tag(key: "a", ccid: "c1", endVersion: 2)
        let before = ChangeSequence.render(7, tag: tag, history: 0x1111_2222_3333)
        let after = ChangeSequence.render(7, tag: tag, history: 0x4444_5555_6666)
        #expect(before != after && before.prefix(12) == after.prefix(12), "the counter stays, the tag differs")
        #expect(ChangeSequence.parse(before, history: 0x4444_5555_6666)?.tag != tag)
        #expect(ChangeSequence.parse(after, history: 0x4444_5555_6666)?.tag == tag)
    }

    @Test func refusesForeignChangeVersions() {
        for text in ["", "abc", "5119dafb37a401031d47c0f", "ZZ19dafb37a401031d47c0f7", "5119DAFB37A401031D47C0F7", "5119dafb37a401031d47c0f7a"] {
            #expect(ChangeSequence.parse(text, history: 0) == nil, "\(text)")
        }
    }

    /// What tells two histories apart: the same counter names another change after a restore.
    @Test func theTagNamesTheChangeNotOnlyItsNumber() {
        let one = ChangeSequence.tag(key: "a", ccid: "c1", endVersion: 2)
        #expect(one == ChangeSequence.tag(key: "a", ccid: "c1", endVersion: 2))
        #expect(one != ChangeSequence.tag(key: "a", ccid: "c2", endVersion: 2))
        #expect(one != ChangeSequence.tag(key: "b", ccid: "c1", endVersion: 2))
        #expect(one != ChangeSequence.tag(key: "a", ccid: "c1", endVersion: 3))
        #expect(ChangeSequence.tag(key: "ab", ccid: "c", endVersion: 1) != ChangeSequence.tag(key: "a", ccid: "bc", endVersion: 1))
        #expect(ChangeSequence.baseTag(bucketID: 1, base: 5) != ChangeSequence.baseTag(bucketID: 2, base: 5))
        #expect(one <= 0xffff_ffff_ffff)
    }
}

struct ServerHistoryTests {
    /// Where a database was last served decides whether its history goes on: a restore or a
    /// copy (another origin) and an upgrade from before histories (none recorded, changes
    /// taken) begin a new one; a new database begins one without a word.
    @Test func aHistoryGoesOnOnlyWhereItWasServed() {
        let draw = { UInt64(0xabc) }
        let continued = ServerHistory.establish(recordedNumber: 7, recordedOrigin: "sqlite:1:2", origin: "sqlite:1:2", hasChanges: true, draw: draw)
        #expect(continued == ServerHistory(number: 7, start: .continued))
        let copied = ServerHistory.establish(recordedNumber: 7, recordedOrigin: "sqlite:1:2", origin: "sqlite:1:3", hasChanges: true, draw: draw)
        #expect(copied == ServerHistory(number: 0xabc, start: .moved))
        let upgraded = ServerHistory.establish(recordedNumber: nil, recordedOrigin: nil, origin: "sqlite:1:2", hasChanges: true, draw: draw)
        #expect(upgraded == ServerHistory(number: 0xabc, start: .moved))
        let new = ServerHistory.establish(recordedNumber: nil, recordedOrigin: nil, origin: "sqlite:1:2", hasChanges: false, draw: draw)
        #expect(new == ServerHistory(number: 0xabc, start: .new))
        let drawn = Set((0..<50).map { _ in ServerHistory.establish(recordedNumber: nil, recordedOrigin: nil, origin: "o", hasChanges: false).number })
        #expect(drawn.count > 45 && drawn.allSatisfy { $0 != 0 && $0 <= ChangeSequence.tagMask })
    }
}

struct IndexCursorTests {
    @Test func roundTripsKeysAndRefusesGarbage() {
        for key in ["a", "note.1", "x%2Fy@z-_", String(repeating: "k", count: 256)] {
            #expect(IndexCursor.decode(IndexCursor.encode(afterKey: key)) == key)
        }
        for mark in ["", "0", "zz", "2f", "6g", String(repeating: "61", count: 300)] {
            #expect(IndexCursor.decode(mark) == nil, "\(mark)")
        }
    }
}

struct OutboxTests {
    @Test func deliversInOrderThenStopsWhenFinished() async {
        let outbox = Outbox(limit: 1000) {}
        #expect(outbox.enqueue("one"))
        #expect(outbox.enqueue("two"))
        outbox.finish()
        #expect(outbox.enqueue("late") == false)
        #expect(await outbox.next() == "one")
        #expect(await outbox.next() == "two")
        #expect(await outbox.next() == nil)
    }

    @Test func overflowAbandonsAndReports() async {
        let overflowed = Flag()
        let outbox = Outbox(limit: 10) { overflowed.set() }
        #expect(outbox.enqueue("12345"))
        #expect(outbox.enqueue("123456") == false)
        #expect(overflowed.isSet)
        #expect(outbox.enqueue("1") == false)
        #expect(await outbox.next() == nil)
    }

    @Test func waitingReaderGetsTheNextFrame() async {
        let outbox = Outbox(limit: 100) {}
        async let next = outbox.next()
        try? await Task.sleep(for: .milliseconds(20))
        outbox.enqueue("hello")
        #expect(await next == "hello")
    }

    @Test func cancellationEndsAWaitingReader() async {
        let outbox = Outbox(limit: 100) {}
        let reader = Task { await outbox.next() }
        try? await Task.sleep(for: .milliseconds(20))
        reader.cancel()
        #expect(await reader.value == nil)
    }
}

final class Flag: @unchecked Sendable {
    private let lock = NSLock()
    private var value = false
    func set() { lock.withLock { value = true } }
    var isSet: Bool { lock.withLock { value } }
}

struct ChangeResolverTests {
    private func change(_ diff: ObjectDiff?, sv: Int? = nil, data: JSONObject? = nil, operation: ChangeOperation = .modify) -> ChangeRequest {
        ChangeRequest(id: "k", operation: operation, diff: diff, sourceVersion: sv, ccid: "c", data: data)
    }

    @Test func createApplyAndErrors() throws {
        let add: ObjectDiff = ["a": .insert(1)]
        #expect(ChangeResolver.resolve(change(add), current: nil) { _ in nil }
            == .accepted(.modify(data: ["a": 1], diff: add, sourceVersion: nil, endVersion: 1)))
        #expect(ChangeResolver.resolve(change(add, sv: 1), current: nil) { _ in nil } == .refused(.notFound))
        let current = EntityState(version: 3, data: ["a": 0])
        #expect(ChangeResolver.resolve(change(["a": .replace(1)]), current: current) { _ in nil } == .refused(.badVersion))
        #expect(ChangeResolver.resolve(change(["a": .replace(0)], sv: 3), current: current) { _ in nil } == .refused(.emptyChange))
        #expect(ChangeResolver.resolve(change(["b": .remove], sv: 3), current: current) { _ in nil } == .refused(.invalidDiff))
        #expect(ChangeResolver.resolve(change(nil, sv: 3), current: current) { _ in nil } == .refused(.invalidRequest))
        #expect(ChangeResolver.resolve(change(nil, operation: .remove), current: EntityState(version: 2, data: nil)) { _ in nil } == .refused(.notFound))
        #expect(ChangeResolver.resolve(change(nil, operation: .remove), current: current) { _ in nil } == .accepted(.remove(sourceVersion: 3, endVersion: 4)))
        #expect(ChangeResolver.resolve(change(nil, sv: 3, operation: .remove), current: current) { _ in nil } == .accepted(.remove(sourceVersion: 3, endVersion: 4)))
        #expect(ChangeResolver.resolve(change(nil, sv: 2, operation: .remove), current: current) { _ in nil } == .accepted(.remove(sourceVersion: 3, endVersion: 4)))
    }

    @Test func recreationAfterDeleteContinuesVersions() throws {
        let add: ObjectDiff = ["a": .insert(1)]
        #expect(ChangeResolver.resolve(change(add), current: EntityState(version: 4, data: nil)) { _ in nil }
            == .accepted(.modify(data: ["a": 1], diff: add, sourceVersion: nil, endVersion: 5)))
    }

    @Test func staleSourceVersionIsRebasedOverHistory() throws {
        let current = EntityState(version: 2, data: ["a": 1, "b": 2])
        let result = ChangeResolver.resolve(change(["c": .insert(3)], sv: 1), current: current) { version in
            version == 1 ? ["a": 1] : nil
        }
        guard case .accepted(.modify(let data, let diff, let sv, let ev)) = result else {
            Issue.record("expected success, got \(result)"); return
        }
        #expect(data == ["a": 1, "b": 2, "c": 3])
        #expect(sv == 2 && ev == 3)
        #expect(try JSONDiffing.apply(diff, to: ["a": 1, "b": 2]) == data)
        #expect(ChangeResolver.resolve(change(["c": .insert(3)], sv: 1), current: current) { _ in nil } == .refused(.badVersion))
    }
}
