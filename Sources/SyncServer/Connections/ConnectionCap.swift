import Logging
import NIOConcurrencyHelpers
import NIOCore

/// At most `limit` connections at once, kept below the descriptor limit (`DescriptorLimit`):
/// one more is closed as soon as it is accepted, and the first refusal of a burst is logged
/// (issue 20: nothing was logged while the server ran out of descriptors). NIO's accept loop
/// itself backs off for a second on EMFILE (`AcceptBackoffHandler`), so it does not spin.
final class ConnectionCap: Sendable {
    let limit: Int
    private let state = NIOLockedValueBox((open: 0, refusedSinceLog: 0, lastLog: NIODeadline.distantPast))
    private static let logEvery = TimeAmount.seconds(10)

    init(limit: Int) {
        self.limit = max(1, limit)
    }

    /// Counts `channel` until it closes; false (and closes it) when the cap is reached.
    func admit(_ channel: any Channel, logger: Logger) -> Bool {
        let now = NIODeadline.now()
        let (admitted, refusedToLog) = state.withLockedValue { state -> (Bool, Int?) in
            guard state.open >= limit else {
                state.open += 1
                return (true, nil)
            }
            state.refusedSinceLog += 1
            guard now - state.lastLog >= Self.logEvery else { return (false, nil) }
            defer {
                state.lastLog = now
                state.refusedSinceLog = 0
            }
            return (false, state.refusedSinceLog)
        }
        guard admitted else {
            if let refused = refusedToLog {
                logger.warning("connection cap reached: refusing connections", metadata: [
                    "cap": "\(limit)", "refused": "\(refused)",
                ])
            }
            channel.close(promise: nil)
            return false
        }
        channel.closeFuture.whenComplete { _ in self.state.withLockedValue { $0.open -= 1 } }
        return true
    }
}
