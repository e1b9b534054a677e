import Synchronization
import Testing
@testable import SyncClient

/// The reader-to-client handoff of a connection: order, one message ahead at most, and how the
/// end (or the reader's failure) reaches the client after everything put before it.
struct InboundHandoffTests {
    struct ReaderFailed: Error, Equatable {}

    @Test(arguments: [0, 1, 2, 500])
    func everyMessageArrivesOnceInOrderAndTheReaderStaysAtMostOneAhead(count: Int) async throws {
        let handoff = InboundHandoff<Int>()
        let put = Atomic<Int>(0)
        let reader = Task {
            for number in 0..<count {
                await handoff.put(number)
                put.add(1, ordering: .sequentiallyConsistent)
            }
            handoff.finish()
        }
        var taken: [Int] = []
        while let number = try await handoff.take() {
            // The one taken, and at most one more waiting in the slot: never two ahead.
            #expect(put.load(ordering: .sequentiallyConsistent) <= taken.count + 2)
            taken.append(number)
            if number % 7 == 0 { try await Task.sleep(for: .milliseconds(1)) }
        }
        await reader.value
        #expect(taken == Array(0..<count))
        #expect(try await handoff.take() == nil, "the end is reported again, not waited on")
    }

    @Test func theReadersFailureComesAfterWhatItPutBefore() async throws {
        let handoff = InboundHandoff<String>()
        Task {
            await handoff.put("a")
            await handoff.put("b")
            handoff.finish(throwing: ReaderFailed())
        }
        #expect(try await handoff.take() == "a")
        #expect(try await handoff.take() == "b")
        await #expect(throws: ReaderFailed.self) { try await handoff.take() }
    }

    @Test func aTakerWaitingForTheNextMessageIsWokenByIt() async throws {
        let handoff = InboundHandoff<String>()
        let taker = Task { try await handoff.take() }
        try await Task.sleep(for: .milliseconds(50))
        await handoff.put("late")
        #expect(try await taker.value == "late")
        let ending = Task { try await handoff.take() }
        try await Task.sleep(for: .milliseconds(50))
        handoff.finish()
        #expect(try await ending.value == nil)
    }
}
