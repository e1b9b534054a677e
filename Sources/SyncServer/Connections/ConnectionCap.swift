import Logging
import NIOConcurrencyHelpers
import NIOCore

/// At most `limit` connections at once, kept below the descriptor limit (`DescriptorLimit`).
/// NIO's accept loop itself backs off for a second on EMFILE (`AcceptBackoffHandler`), so it
/// does not spin.
///
/// At the cap, a new connection takes the place of the oldest one that has not logged in (a
/// Simperium `init`, an Apptimist LOGIN, a Telepat device bound): that one is closed (issue 38:
/// a flood of connections that never log in crowded real clients out, each slot held for the
/// 10 s init deadline, and 8 of 30 clients were refused). Connections that have logged in are
/// never closed for room; when they alone fill the cap, the new one is closed as soon as it is
/// accepted. The first refusal of a burst is logged (issue 20: nothing was logged while the
/// server ran out of descriptors), and each close for room is counted.
final class ConnectionCap: Sendable {
    let limit: Int
    private let statistics: ServerStatistics
    private let state = NIOLockedValueBox(State())
    private static let logEvery = TimeAmount.seconds(10)

    private struct State {
        /// Every open connection: whether it has logged in, and when it was accepted.
        var open: [ObjectIdentifier: Entry] = [:]
        var refusedSinceLog = 0
        var lastLog = NIODeadline.distantPast
        /// How many open connections have not logged in (the candidates for a close).
        var notLoggedIn = 0
    }

    private struct Entry {
        let channel: any Channel
        let accepted: NIODeadline
        var loggedIn = false
    }

    /// The close reason counted in `statistics` (`bucketfs_http_closes_total{reason=}`).
    static let closedForRoom = "closed for room at the connection cap"

    init(limit: Int, statistics: ServerStatistics) {
        self.limit = max(1, limit)
        self.statistics = statistics
    }

    /// Counts `channel` until it closes; false (and closes it) when the cap is reached and every
    /// connection has logged in. Otherwise, at the cap, closes the oldest that has not.
    func admit(_ channel: any Channel, logger: Logger) -> Bool {
        let now = NIODeadline.now()
        let id = ObjectIdentifier(channel)
        enum Outcome { case admitted, admittedInPlaceOf(any Channel), refused(toLog: Int?) }
        let outcome = state.withLockedValue { state -> Outcome in
            if state.open.count < limit {
                state.open[id] = Entry(channel: channel, accepted: now)
                state.notLoggedIn += 1
                return .admitted
            }
            if state.notLoggedIn > 0,
               let (oldestID, oldest) = state.open.lazy.filter({ !$0.value.loggedIn }).min(by: { $0.value.accepted < $1.value.accepted }) {
                // The new one takes its place in the count (notLoggedIn unchanged).
                state.open[oldestID] = nil
                state.open[id] = Entry(channel: channel, accepted: now)
                return .admittedInPlaceOf(oldest.channel)
            }
            state.refusedSinceLog += 1
            guard now - state.lastLog >= Self.logEvery else { return .refused(toLog: nil) }
            defer {
                state.lastLog = now
                state.refusedSinceLog = 0
            }
            return .refused(toLog: state.refusedSinceLog)
        }
        switch outcome {
        case .admitted:
            break
        case .admittedInPlaceOf(let oldest):
            if statistics.countClose(reason: Self.closedForRoom) {
                logger.warning("connection cap reached: closing the oldest connections that have not logged in; further closes are counted, not logged", metadata: [
                    "cap": "\(limit)",
                ])
            }
            oldest.close(promise: nil)
        case .refused(let toLog):
            if let toLog {
                logger.warning("connection cap reached: refusing connections", metadata: [
                    "cap": "\(limit)", "refused": "\(toLog)",
                ])
            }
            channel.close(promise: nil)
            return false
        }
        channel.closeFuture.whenComplete { _ in
            self.state.withLockedValue { state in
                // Gone already if it was closed for room.
                guard let entry = state.open.removeValue(forKey: id) else { return }
                if !entry.loggedIn { state.notLoggedIn -= 1 }
            }
        }
        return true
    }

    /// The connection `id` has logged in: it keeps its place at the cap.
    func loggedIn(_ id: ObjectIdentifier) {
        state.withLockedValue { state in
            guard state.open[id]?.loggedIn == false else { return }
            state.open[id]?.loggedIn = true
            state.notLoggedIn -= 1
        }
    }
}
