/// Runs async jobs on a `WorkQueue` thread of its own: the remote-change feed keeps flowing even
/// when every thread of Swift's shared pool is blocked in other code (a blocked pool otherwise
/// delays kernel invalidations indefinitely).
final class ThreadTaskExecutor: TaskExecutor, @unchecked Sendable {
    private let queue: WorkQueue

    init(name: String) {
        queue = WorkQueue(name: name, threads: 1)
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        queue.async { [self] in job.runSynchronously(on: asUnownedTaskExecutor()) }
    }

    func stop() {
        queue.stop()
    }
}
