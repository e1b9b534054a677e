import Logging
import NIOConcurrencyHelpers
import PostgresNIO
// The pool's own errors (its circuit breaker) are not re-exported by PostgresNIO.
import _ConnectionPoolModule

/// Tells a database that does not answer (stopped, restarting, unreachable, out of connections)
/// from one that refused a statement, and bounds how long a request waits for a connection.
///
/// postgres-nio's pool queues a request while it cannot connect, for up to a minute before its
/// circuit breaker fails them; a request of this server waits `connectionWait` at most, then
/// gets `SyncServerError.databaseUnavailable`, which the auth API answers with 503 and the
/// streaming API by closing the connection (its clients reconnect with backoff).
enum PostgresAvailability {
    /// How long a request waits for a pooled connection.
    static let connectionWait: Duration = .seconds(5)
    /// How long one use of a leased connection may take, from the lease, before the connection
    /// is closed under it: postgres-nio can leave a statement on a connection PostgreSQL dropped
    /// unanswered for good (it happens when PostgreSQL stops at that instant), which would hold
    /// the lease, and with it the node's change writer. On a working database a batch commits in
    /// milliseconds, but a busy machine or a long lock wait can take seconds: 30 s then.
    static let statementDeadline: Duration = .seconds(30)
    /// The deadline while the database has dropped connections lately (`afterConnectionFailure`):
    /// a statement that hangs then is almost surely on a dead connection, and the writer must be
    /// free again soon after the database is back (issue 35: at 30 s, every writer waited ~26 s
    /// after an outage ended).
    static let statementDeadlineAfterFailure: Duration = .seconds(8)
    /// How long a connection failure counts as lately.
    static let afterConnectionFailure: Duration = .seconds(120)

    /// When each client (by identity) last saw the database drop or refuse a connection.
    private static let lastConnectionFailure = NIOLockedValueBox<[ObjectIdentifier: ContinuousClock.Instant]>([:])

    /// Where each client's `DatabaseEvent`s go (the server's metrics), by client.
    private static let observers = NIOLockedValueBox<[ObjectIdentifier: @Sendable (DatabaseEvent) -> Void]>([:])

    static func setObserver(_ observer: @escaping @Sendable (DatabaseEvent) -> Void, for client: PostgresClient) {
        observers.withLockedValue { $0[ObjectIdentifier(client)] = observer }
    }

    static func report(_ event: DatabaseEvent, for client: PostgresClient) {
        observers.withLockedValue { $0[ObjectIdentifier(client)] }?(event)
    }

    /// `client` saw the database drop a connection or refuse one (not a busy pool).
    static func noteConnectionFailure(_ client: PostgresClient) {
        lastConnectionFailure.withLockedValue { $0[ObjectIdentifier(client)] = .now }
    }

    /// The statement deadline for a lease of `client` now.
    static func statementDeadline(for client: PostgresClient) -> Duration {
        let last = lastConnectionFailure.withLockedValue { $0[ObjectIdentifier(client)] }
        guard let last, ContinuousClock.now - last < afterConnectionFailure else { return statementDeadline }
        return statementDeadlineAfterFailure
    }

    /// Whether `error` says the database dropped or refused a connection: not a pool that was
    /// only busy, nor a deadline of ours (a slow machine must not shorten the next deadlines).
    static func isConnectionFailure(_ error: any Error) -> Bool {
        switch error {
        case is ConnectionWaitExpired, is StatementDeadlineExpired, is SyncServerError: return false
        default: return isUnavailable(error)
        }
    }

    /// Whether `error` means the database could not be reached rather than a refused statement.
    static func isUnavailable(_ error: any Error) -> Bool {
        switch error {
        case is ConnectionWaitExpired, is ConnectionClosedAtLease, is StatementDeadlineExpired, is ConnectionPoolError:
            return true
        case let error as SyncServerError:
            if case .databaseUnavailable = error { return true }
            return false
        case let error as PostgresTransactionError:
            return [error.beginError, error.closureError, error.commitError, error.rollbackError]
                .contains { $0.map(isUnavailable) ?? false }
        case let error as PSQLError:
            switch error.code {
            case .connectionError, .serverClosedConnection, .clientClosedConnection, .uncleanShutdown, .poolClosed, .queryCancelled:
                return true
            case .server:
                // Class 08: connection exceptions; 57P01-03: the server shutting down or starting;
                // 53300: too many connections; FATAL or PANIC: the session is over.
                let state = error.serverInfo?[.sqlState] ?? ""
                let severity = error.serverInfo?[.severity] ?? ""
                return state.hasPrefix("08") || ["57P01", "57P02", "57P03", "53300"].contains(state) || ["FATAL", "PANIC"].contains(severity)
            default:
                return false
            }
        default:
            return false
        }
    }

    /// Whether a connection that just failed a statement with `error` can take another (a
    /// ROLLBACK): only after an error the server reported for that statement. A statement sent
    /// on a connection the server dropped may never be answered by postgres-nio.
    static func connectionIsUsable(after error: any Error) -> Bool {
        if isUnavailable(error) { return false }
        if let error = error as? PSQLError { return error.code == .server }
        return !(error is PostgresTransactionError)
    }

    /// `error` as `databaseUnavailable` when it is one (naming `what` failed), else unchanged.
    static func classified(_ error: any Error, _ what: String) -> any Error {
        if let error = error as? SyncServerError, case .databaseUnavailable = error { return error }
        guard isUnavailable(error) else { return error }
        return SyncServerError.databaseUnavailable("\(what): \(reason(error))")
    }

    /// A short reason for logs and messages.
    static func reason(_ error: any Error) -> String {
        if let error = error as? PSQLError {
            if let message = error.serverInfo?[.message] { return message }
            if let underlying = error.underlying { return "\(error.code): \(underlying)" }
            return "\(error.code)"
        }
        return "\(error)"
    }

    struct ConnectionClosedAtLease: Error, CustomStringConvertible {
        var description: String { "the pool handed out a connection the database had closed" }
    }

    struct ConnectionWaitExpired: Error, CustomStringConvertible {
        var description: String { "no connection within \(PostgresAvailability.connectionWait)" }
    }

    struct StatementDeadlineExpired: Error, CustomStringConvertible {
        var deadline = PostgresAvailability.statementDeadline
        var description: String { "no answer within \(deadline); the connection was closed" }
    }
}

extension PostgresClient {
    /// Leases a connection for `body`, giving up after `PostgresAvailability.connectionWait`
    /// without one; a body that holds its connection past `statementDeadline` has it closed
    /// under it and is no longer waited for. Errors that mean the database is gone come out as
    /// `SyncServerError.databaseUnavailable`.
    ///
    /// The body runs in a task of its own, not a child: a task group waits for every child, so a
    /// statement postgres-nio never answers (it can happen when the server drops the connection
    /// at that instant) would hold the caller, and with it a node's change writer, for good.
    func withAvailableConnection<T: Sendable>(
        _ what: String, deadline chosen: Duration? = nil,
        _ body: @escaping @Sendable (PostgresConnection) async throws -> T
    ) async throws -> T {
        let lease = ConnectionLease<T>()
        let asked = ContinuousClock.now
        do {
            return try await withCheckedThrowingContinuation { continuation in
                lease.waiting(continuation)
                let work = Task {
                    do {
                        let value = try await self.withConnection { connection in
                            // Given up on already: never start the body late (a batch of
                            // changes committed after its clients were told it failed).
                            guard lease.leased(connection) else { throw PostgresAvailability.ConnectionWaitExpired() }
                            PostgresAvailability.report(.connectionWait(ContinuousClock.now - asked), for: self)
                            // A connection the database closed (stopped, restarted) can still be
                            // handed out; a statement on it may never be answered.
                            guard !connection.isClosed else { throw PostgresAvailability.ConnectionClosedAtLease() }
                            return try await body(connection)
                        }
                        lease.finish(.success(value))
                    } catch {
                        lease.finish(.failure(error))
                    }
                }
                let watch = Task {
                    try await Task.sleep(for: PostgresAvailability.connectionWait)
                    guard let (connection, leasedAt) = lease.connectionOrGiveUp() else {
                        work.cancel()
                        return
                    }
                    let deadline = chosen ?? PostgresAvailability.statementDeadline(for: self)
                    try await Task.sleep(until: leasedAt + deadline)
                    // Closing fails what is pending on it, so the body usually ends on its own.
                    try? await connection.close()
                    try await Task.sleep(for: .seconds(1))
                    lease.finish(.failure(PostgresAvailability.StatementDeadlineExpired(deadline: deadline)))
                    work.cancel()
                }
                lease.onFinish { watch.cancel() }
            }
        } catch {
            if PostgresAvailability.isConnectionFailure(error) { PostgresAvailability.noteConnectionFailure(self) }
            throw PostgresAvailability.classified(error, what)
        }
    }

    /// Every row of one statement, on a connection leased within the wait.
    func rows(_ query: PostgresQuery, _ what: String, logger: Logger) async throws -> [PostgresRow] {
        try await withAvailableConnection(what) { connection in
            try await PostgresRows.rows(connection.query(query, logger: logger))
        }
    }

    /// The first column of the first row of one statement (nil: no row).
    func one<T: PostgresDecodable & Sendable>(_ query: PostgresQuery, as type: T.Type, _ what: String, logger: Logger) async throws -> T? {
        try await withAvailableConnection(what) { connection in
            try await PostgresRows.one(connection.query(query, logger: logger), as: type)
        }
    }
}

/// One `withAvailableConnection` call: its caller's continuation, resumed once, by the body's
/// end or by the watch giving up, whichever comes first.
private final class ConnectionLease<T: Sendable>: Sendable {
    private typealias Ending = (continuation: CheckedContinuation<T, any Error>?, onFinish: (@Sendable () -> Void)?)

    private struct State: Sendable {
        var continuation: CheckedContinuation<T, any Error>?
        var connection: PostgresConnection?
        var leasedAt = ContinuousClock.now
        var finished = false
        var onFinish: (@Sendable () -> Void)?

        /// Marks the call finished: what is left to resume and run, the first time only.
        mutating func ending() -> Ending? {
            guard !finished else { return nil }
            finished = true
            defer { (continuation, onFinish) = (nil, nil) }
            return (continuation, onFinish)
        }
    }
    private let state = NIOLockedValueBox(State())

    func waiting(_ continuation: CheckedContinuation<T, any Error>) {
        state.withLockedValue { $0.continuation = continuation }
    }

    /// The body got `connection`; false when the call was given up already.
    func leased(_ connection: PostgresConnection) -> Bool {
        state.withLockedValue { state in
            guard !state.finished else { return false }
            state.connection = connection
            state.leasedAt = .now
            return true
        }
    }

    /// The leased connection, or nil after failing the call for want of one (in one step: a
    /// body leasing at this instant either counts, or is refused by `leased`).
    func connectionOrGiveUp() -> (PostgresConnection, leasedAt: ContinuousClock.Instant)? {
        let (connection, ending) = state.withLockedValue { state -> ((PostgresConnection, ContinuousClock.Instant)?, Ending?) in
            if !state.finished, let connection = state.connection { return ((connection, state.leasedAt), nil) }
            return (nil, state.ending())
        }
        end(ending, with: .failure(PostgresAvailability.ConnectionWaitExpired()))
        return connection
    }

    func onFinish(_ action: @escaping @Sendable () -> Void) {
        let finished = state.withLockedValue { state in
            if !state.finished { state.onFinish = action }
            return state.finished
        }
        if finished { action() }
    }

    func finish(_ result: Result<T, any Error>) {
        end(state.withLockedValue { $0.ending() }, with: result)
    }

    private func end(_ ending: Ending?, with result: Result<T, any Error>) {
        guard let ending else { return }
        ending.continuation?.resume(with: result)
        ending.onFinish?()
    }
}
