import CFuse
import Foundation

/// What the kernel must forget after a remote change.
enum Invalidation: Hashable, Sendable {
    /// Cached pages and attributes of an inode.
    case inode(UInt64)
    /// A (possibly negative) name in a directory.
    case entry(parent: UInt64, name: String)
}

/// The one thread that calls `fuse_lowlevel_notify_inval_*`. The kernel may need to take locks
/// held by an in-flight request to honour a notification, so notifying from a request handler (or
/// while holding a lock a handler needs) can deadlock; a queue and its own thread avoid both.
final class InvalidationNotifier: @unchecked Sendable {
    // The session pointer is set once before `start` and read only by the notifier thread.
    private let session: OpaquePointer
    private let condition = NSCondition()
    private var queue: [Invalidation] = []
    /// Inodes whose drop notices are queued or being sent, with how many: until then the kernel
    /// may hold an old size for them, and cuts reads there.
    private var inodesOnTheirWay: [UInt64: Int] = [:]
    private var stopping = false
    private var finished = false

    init(session: OpaquePointer) {
        self.session = session
    }

    func start() {
        Thread.start(named: "bucketfs-notifier") { [self] in run() }
    }

    func enqueue(_ items: [Invalidation]) {
        guard !items.isEmpty else { return }
        condition.lock()
        if !stopping {
            queue.append(contentsOf: items)
            for case .inode(let ino) in items { inodesOnTheirWay[ino, default: 0] += 1 }
        }
        condition.signal()
        condition.unlock()
    }

    /// Whether a notice that `ino` changed has not reached the kernel yet: it may still hold
    /// the old size (an open of it reads through to the file system meanwhile).
    func isOnItsWay(_ ino: UInt64) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        return inodesOnTheirWay[ino] != nil
    }

    /// Drops what is queued and waits for the thread to end (before the session is destroyed).
    func stop() {
        condition.lock()
        stopping = true
        queue.removeAll()
        inodesOnTheirWay.removeAll()
        condition.broadcast()
        while !finished { condition.wait() }
        condition.unlock()
    }

    private func run() {
        while true {
            condition.lock()
            while queue.isEmpty && !stopping { condition.wait() }
            if stopping {
                finished = true
                condition.broadcast()
                condition.unlock()
                return
            }
            let batch = queue
            queue.removeAll()
            condition.unlock()
            for item in batch {
                send(item)
                guard case .inode(let ino) = item else { continue }
                condition.lock()
                if let count = inodesOnTheirWay[ino] { inodesOnTheirWay[ino] = count > 1 ? count - 1 : nil }
                condition.unlock()
            }
        }
    }

    private func send(_ item: Invalidation) {
        switch item {
        case .inode(let ino):
            // -ENOENT just means the kernel no longer caches the inode.
            _ = fuse_lowlevel_notify_inval_inode(session, ino, 0, 0)
        case .entry(let parent, let name):
            _ = name.withCString { fuse_lowlevel_notify_inval_entry(session, parent, $0, name.utf8.count) }
        }
    }
}
