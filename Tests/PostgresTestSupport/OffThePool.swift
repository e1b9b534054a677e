import Foundation

/// Runs blocking `work` (a socket read, a tool run to its end, file access on a FUSE mount, a poll
/// with sleeps between its tries) on a thread of its own; the calling task waits for it without
/// holding a thread of Swift's cooperative pool, which has one thread per core and is shared
/// with the other tests of the process and with the code under test. (In this module because it
/// is the one every test target that needs it can import.)
///
/// `work` and its result need not be Sendable: the caller is suspended until `work` has
/// returned, so what `work` touches is used by one thread at a time, as in a plain call.
public func offThePool<Value, Failure: Error>(_ work: @escaping () throws(Failure) -> Value) async throws(Failure) -> Value {
    let handed = HandedOver(work)
    let result = await withCheckedContinuation { (continuation: CheckedContinuation<HandedOver<Result<Value, Failure>>, Never>) in
        Thread.detachNewThread {
            continuation.resume(returning: HandedOver(Result { () throws(Failure) in try handed.value() }))
        }
    }
    return try result.value.get()
}

/// What `offThePool` hands to its thread and back (why that is safe: see there).
private struct HandedOver<Value>: @unchecked Sendable {
    let value: Value

    init(_ value: Value) {
        self.value = value
    }
}
