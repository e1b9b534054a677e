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

    /// Its workers carry the queue's name in the kernel (what `top -H` and `perf` show), cut to
    /// the kernel's 15 bytes.
    @Test func workersAreNamedForTheKernel() throws {
        let queue = WorkQueue(name: "test-named-queue", threads: 1)
        defer { queue.stop() }
        let name = Mutex<String?>(nil)
        let done = DispatchSemaphore(value: 0)
        queue.async {
            name.withLock { $0 = try? String(contentsOfFile: "/proc/thread-self/comm", encoding: .utf8) }
            done.signal()
        }
        done.wait()
        #expect(name.withLock { $0 } == "test-named-queu\n")
    }

    /// A queued job's captures are released once it has run, on serial and wider queues, for
    /// a few jobs as for more than the queue trims at once: nothing a job held stays with the
    /// queue (a first sync's remote changes pass through it a page at a time).
    @Test(arguments: [(1, 10), (1, 3_000), (4, 10), (4, 3_000)])
    func aJobsCapturesGoOnceItHasRun(threads: Int, jobs: Int) {
        final class Payload: Sendable {}
        let queue = WorkQueue(name: "test-release", threads: threads)
        defer { queue.stop() }
        var watched: [() -> Payload?] = []
        for _ in 0 ..< jobs {
            let payload = Payload()
            weak let weakPayload = payload
            watched.append { weakPayload }
            queue.async { withExtendedLifetime(payload) {} }
        }
        let done = DispatchSemaphore(value: 0)
        queue.async { done.signal() }
        done.wait()
        // The last job may still be finishing on another worker: give it a moment (a hang guard:
        // on a busy machine that worker may wait seconds for a CPU).
        let deadline = Date(timeIntervalSinceNow: Patience.seconds)
        while watched.contains(where: { $0() != nil }) && Date() < deadline { Thread.sleep(forTimeInterval: 0.01) }
        #expect(watched.filter { $0() != nil }.count == 0)
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
