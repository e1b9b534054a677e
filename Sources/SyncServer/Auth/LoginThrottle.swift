import Foundation
import NIOConcurrencyHelpers

/// One login-attempt bucket: `burst` attempts, one more every `refill`.
public struct LoginLimit: Sendable, Hashable {
    public var burst: Int
    public var refill: Duration

    public init(burst: Int, refill: Duration) {
        self.burst = max(1, burst)
        self.refill = refill
    }
}

/// Limits password guessing per user and per address (issue 20: 500 wrong passwords in a row
/// were all answered at full speed). Each key has a bucket of `burst` attempts that refills one
/// every `refill`; a login attempt (and every account creation, per address) takes one, given
/// back when the password is right. An empty bucket is answered 429 with Retry-After before
/// any hashing.
///
/// The per-user bucket brakes the guessing, not the owner (issue 38: ten wrong passwords
/// locked the user out from everywhere, and one guess every few seconds kept them out): an
/// address that has logged in as a user keeps an allowance of its own for that user (as large
/// as the per-user one), and the shared per-user bucket counts only the other addresses. The
/// per-address limit holds for everyone.
final class LoginThrottle: Sendable {
    private struct Bucket {
        var tokens: Double
        var updated: ContinuousClock.Instant
    }

    /// Buckets kept at most; past it the full (refilled) ones are dropped first.
    static let maxBuckets = 100_000
    /// (user, address) pairs remembered as having logged in, at most; past it they are
    /// forgotten, and an owner's next login from their address makes theirs known again.
    static let maxKnownAddresses = 100_000

    private let perUser: LoginLimit
    private let perAddress: LoginLimit
    private let buckets = NIOLockedValueBox([String: Bucket]())
    /// `user + "\n" + address` of each address that has logged in as that user.
    private let knownAddresses = NIOLockedValueBox(Set<String>())
    private let clock = ContinuousClock()

    init(perUser: LoginLimit, perAddress: LoginLimit) {
        self.perUser = perUser
        self.perAddress = perAddress
    }

    /// Takes one attempt from the bucket of `username` and of `address`, before any hashing
    /// (so concurrent guesses cannot overshoot); if either has none left, takes nothing and
    /// returns how long to wait.
    func admit(username: String?, address: String?) -> Duration? {
        let now = clock.now
        return buckets.withLockedValue { buckets -> Duration? in
            if buckets.count >= Self.maxBuckets { Self.prune(&buckets, now: now, limits: (perUser, perAddress)) }
            let keyed = keys(username: username, address: address).map { key, limit in
                (key, limit, Self.refilled(buckets[key], limit: limit, now: now))
            }
            let waits = keyed.compactMap { _, limit, bucket in bucket.tokens >= 1 ? nil : limit.refill * (1 - bucket.tokens) }
            if let wait = waits.max() { return wait }
            for (key, _, bucket) in keyed { buckets[key] = Bucket(tokens: bucket.tokens - 1, updated: now) }
            return nil
        }
    }

    /// A `Retry-After` value for `wait` (RFC 9110 §10.2.3): whole seconds, rounded up so the
    /// client never comes back too early.
    static func retryAfterValue(_ wait: Duration) -> String {
        let seconds = Int((Double(wait.components.seconds) + Double(wait.components.attoseconds) / 1e18).rounded(.up))
        return "\(max(1, seconds))"
    }

    /// The password was right: gives back what `admit` took (a correct password costs
    /// nothing), and `address` keeps an allowance of its own for `username` from now on.
    func succeeded(username: String, address: String?) {
        let now = clock.now
        let keys = keys(username: username, address: address)
        buckets.withLockedValue { buckets in
            for (key, limit) in keys {
                var bucket = Self.refilled(buckets[key], limit: limit, now: now)
                bucket.tokens = min(Double(limit.burst), bucket.tokens + 1)
                buckets[key] = bucket
            }
        }
        guard let address else { return }
        knownAddresses.withLockedValue { known in
            if known.count >= Self.maxKnownAddresses { known.removeAll() }
            known.insert(username + "\n" + address)
        }
    }

    private func keys(username: String?, address: String?) -> [(String, LoginLimit)] {
        var keys: [(String, LoginLimit)] = []
        if let username {
            if let address, knownAddresses.withLockedValue({ $0.contains(username + "\n" + address) }) {
                keys.append(("k:" + username + "\n" + address, perUser))
            } else {
                keys.append(("u:" + username, perUser))
            }
        }
        if let address { keys.append(("a:" + address, perAddress)) }
        return keys
    }

    private static func refilled(_ bucket: Bucket?, limit: LoginLimit, now: ContinuousClock.Instant) -> Bucket {
        guard let bucket else { return Bucket(tokens: Double(limit.burst), updated: now) }
        let gained = (now - bucket.updated) / limit.refill
        return Bucket(tokens: min(Double(limit.burst), bucket.tokens + gained), updated: now)
    }

    private static func prune(_ buckets: inout [String: Bucket], now: ContinuousClock.Instant, limits: (LoginLimit, LoginLimit)) {
        buckets = buckets.filter { key, bucket in
            let limit = key.hasPrefix("a:") ? limits.1 : limits.0
            return refilled(bucket, limit: limit, now: now).tokens < Double(limit.burst)
        }
        // Still full of live buckets (a flood of addresses): forget them rather than grow.
        if buckets.count >= maxBuckets { buckets = [:] }
    }
}
