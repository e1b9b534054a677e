import CFuse
import Foundation

extension Thread {
    /// Runs `body` on a new thread that the kernel knows by `name` (its first 15 bytes), as
    /// `top -H`, `perf` and `/proc/<pid>/task/*/comm` show it. Foundation on Linux keeps a name
    /// set before `start()` to itself, so the thread would carry the name of whichever thread
    /// created it; threads it creates in turn (libfuse's workers) inherit this one.
    public static func start(named name: String, _ body: @escaping @Sendable () -> Void) {
        let thread = Thread {
            cfuse_name_this_thread(name)
            body()
        }
        thread.name = name
        thread.start()
    }
}
