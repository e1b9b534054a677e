import Dispatch
import NIOConcurrencyHelpers

/// Runs password hashing one at a time on a thread of its own (issue 20: eight clients guessing
/// kept both cores in PBKDF2 and pushed acknowledgements on open connections from 0.5 ms to
/// 30 ms). Hashing never runs on the cooperative pool the streaming connections use, takes at
/// most one core, and at most `maxWaiting` requests wait: more are refused at once.
final class HashingQueue: Sendable {
    /// The hashing queue is full; answer 429 instead of waiting.
    struct Busy: Error {}

    static let maxWaiting = 64

    private let queue = DispatchQueue(label: "bucketfs-server.password-hashing", qos: .utility)
    private let waiting = NIOLockedValueBox(0)

    func run<Value: Sendable>(_ work: @escaping @Sendable () throws -> Value) async throws -> Value {
        let admitted = waiting.withLockedValue { count -> Bool in
            guard count < Self.maxWaiting else { return false }
            count += 1
            return true
        }
        guard admitted else { throw Busy() }
        return try await withCheckedThrowingContinuation { continuation in
            queue.async {
                defer { self.waiting.withLockedValue { $0 -= 1 } }
                continuation.resume(with: Result { try work() })
            }
        }
    }
}
