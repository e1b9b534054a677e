/// Heartbeat bookkeeping (spec "Heartbeat: h"): after `interval` without any message a `h:n` is
/// sent (0 first, then the server's last count plus one, as the spec asks); no answer within
/// `timeout` means the connection is dead.
struct Heartbeat: Sendable {
    enum Action: Equatable, Sendable {
        case none
        case send(Int)
        case connectionDead
    }

    let interval: Duration
    let timeout: Duration
    private(set) var lastReceived: ContinuousClock.Instant
    private(set) var awaitingSince: ContinuousClock.Instant?
    private(set) var lastCount: Int?

    init(interval: Duration, timeout: Duration, now: ContinuousClock.Instant) {
        self.interval = interval
        self.timeout = timeout
        self.lastReceived = now
    }

    /// Any message shows the connection is alive.
    mutating func received(at now: ContinuousClock.Instant) {
        lastReceived = now
        awaitingSince = nil
    }

    /// The server's `h:n`: the next heartbeat sends n.
    mutating func receivedHeartbeat(_ value: Int, at now: ContinuousClock.Instant) {
        lastCount = value
        received(at: now)
    }

    /// Called periodically; decides whether to ping or give up.
    mutating func tick(now: ContinuousClock.Instant) -> Action {
        if let awaitingSince {
            return now - awaitingSince >= timeout ? .connectionDead : .none
        }
        guard now - lastReceived >= interval else { return .none }
        awaitingSince = now
        return .send(lastCount.map { $0 + 1 } ?? 0)
    }
}
