import Foundation
import Synchronization
import Testing

@testable import BucketFS

/// The work queue: `run` takes the caller's thread only when it would not overtake anything,
/// and a serial queue never runs two jobs at once.
struct WorkQueueTests {
    @Test func anIdleQueueRunsTheJobOnTheCallersThread() {
        let queue = WorkQueue(name: "test-idle", threads: 1)
        defer { queue.stop() }
        let caller = pthread_self()
        let ranHere = Mutex(false)
        queue.run { ranHere.withLock { $0 = pthread_equal(pthread_self(), caller) != 0 } }
        #expect(ranHere.withLock { $0 })
    }

    @Test func jobsKeepTheirOrderAndNeverOverlapOnASerialQueue() {
        let queue = WorkQueue(name: "test-order", threads: 1)
        defer { queue.stop() }
        let log = Mutex<[Int]>([])
        let running = Mutex(0)
        let overlapped = Mutex(false)
        let started = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        // A job holds the queue on another thread; everything handed over meanwhile must wait.
        let holder = Thread {
            queue.run {
                started.signal()
                release.wait()
                log.withLock { $0.append(0) }
            }
        }
        holder.start()
        started.wait()
        for number in 1...50 {
            queue.run {
                let now = running.withLock { count -> Int in
                    count += 1
                    return count
                }
                if now > 1 { overlapped.withLock { $0 = true } }
                log.withLock { $0.append(number) }
                running.withLock { $0 -= 1 }
            }
        }
        release.signal()
        queue.drain()
        #expect(log.withLock { $0 } == Array(0...50))
        #expect(!overlapped.withLock { $0 })
    }
}
