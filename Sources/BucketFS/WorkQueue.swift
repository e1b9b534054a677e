import Foundation

/// A FIFO of jobs run by its own threads. The file system's store work runs here rather than on
/// Dispatch's shared pool, where threads blocked elsewhere in the process (pipes, sockets) can
/// delay a job by seconds while the pool decides to grow.
final class WorkQueue: @unchecked Sendable {
    private let condition = NSCondition()
    private var jobs: [@Sendable () -> Void] = []
    private var head = 0
    private var stopping = false
    /// Jobs running now (at most one on a serial queue), on a worker or on a caller's thread.
    private var running = 0
    private let threads: Int
    /// What a queue slot holds once its job has been taken.
    private static let taken: @Sendable () -> Void = {}

    /// `threads` workers named `name`; one worker makes the queue serial (jobs run in order).
    init(name: String, threads: Int) {
        self.threads = max(threads, 1)
        for index in 0..<max(threads, 1) {
            Thread.start(named: "\(name)-\(index)") { [self] in work() }
        }
    }

    func async(_ job: @escaping @Sendable () -> Void) {
        condition.lock()
        if stopping {
            // After shutdown nothing may be left waiting (a drain would never return).
            condition.unlock()
            return job()
        }
        jobs.append(job)
        condition.signal()
        condition.unlock()
    }

    /// Runs `job` on the calling thread when a worker is free and nothing waits before it, else
    /// queues it. Jobs keep their order either way; the hand-off to another thread (a wake-up,
    /// often on the other CPU) is what a lone request would otherwise wait for.
    func run(_ job: @escaping @Sendable () -> Void) {
        condition.lock()
        guard !stopping, head == jobs.count, running < threads else {
            condition.unlock()
            return async(job)
        }
        execute(job)
        condition.unlock()
    }

    /// Waits until every job queued before this call has run (serial queues only; never call it
    /// from one of this queue's own threads).
    func drain() {
        let done = DispatchSemaphore(value: 0)
        async { done.signal() }
        done.wait()
    }

    /// Lets the workers end once the jobs already queued have run.
    func stop() {
        condition.lock()
        stopping = true
        condition.broadcast()
        condition.unlock()
    }

    private func work() {
        while true {
            condition.lock()
            while (head == jobs.count || running >= threads) && !stopping { condition.wait() }
            if head == jobs.count {
                condition.unlock()
                return
            }
            let job = jobs[head]
            // What a job captured goes with it: a slot kept until the array is trimmed held
            // every batch of a first sync's remote changes (a page of 1,000 each), 165 MB at
            // 1,000,000 entities.
            jobs[head] = Self.taken
            head += 1
            if head == jobs.count {
                jobs.removeAll(keepingCapacity: true)
                head = 0
            } else if head > 1024 && head * 2 > jobs.count {
                jobs.removeFirst(head)
                head = 0
            }
            execute(job)
            condition.unlock()
        }
    }

    /// Runs `job` as one of the `running` ones; called, and returns, with the lock held.
    private func execute(_ job: () -> Void) {
        running += 1
        condition.unlock()
        job()
        condition.lock()
        running -= 1
        // Whatever was queued meanwhile needs a worker now that one is free.
        if head < jobs.count { condition.signal() }
    }
}
