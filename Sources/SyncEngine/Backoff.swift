/// Exponential reconnect delay with jitter, so many clients do not reconnect in lockstep.
public struct Backoff: Sendable {
    public let initial: Duration
    public let maximum: Duration
    public private(set) var failures = 0

    public init(initial: Duration, maximum: Duration) {
        self.initial = initial
        self.maximum = maximum
    }

    /// The delay before the next attempt: initial * 2^failures, capped, times a random 0.5-1.0.
    public mutating func nextDelay(using generator: inout some RandomNumberGenerator) -> Duration {
        let exponent = min(failures, 30)
        failures += 1
        var delay = initial * (1 << exponent)
        if delay > maximum { delay = maximum }
        let jitter = Double.random(in: 0.5...1.0, using: &generator)
        return delay * jitter
    }

    /// A connection that was authorized and lasted resets the delay.
    public mutating func reset() { failures = 0 }
}
