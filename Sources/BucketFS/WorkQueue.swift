import Foundation

/// A FIFO of jobs run by its own threads. The file system's store work runs here rather than on
/// Dispatch's shared pool, where threads blocked elsewhere in the process (pipes, sockets) can
/// delay a job by seconds while the pool decides to grow.
final class WorkQueue: @unchecked Sendable {
    private let condition = NSCondition()
    private var jobs: [@Sendable () -> Void] = []
    private var head = 0
    private var stopping = false

    /// `threads` workers named `name`; one worker makes the queue serial (jobs run in order).
    init(name: String, threads: Int) {
        for index in 0..<max(threads, 1) {
            let thread = Thread { [self] in work() }
            thread.name = "\(name)-\(index)"
            thread.start()
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
            while head == jobs.count && !stopping { condition.wait() }
            if head == jobs.count {
                condition.unlock()
                return
            }
            let job = jobs[head]
            head += 1
            if head > 1024 && head * 2 > jobs.count {
                jobs.removeFirst(head)
                head = 0
            }
            condition.unlock()
            job()
        }
    }
}
