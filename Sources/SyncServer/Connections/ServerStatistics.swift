import NIOConcurrencyHelpers

/// Counts of what the server holds open, for logs, benchmarks and tests (a connection that
/// should have been closed shows up here, whatever the peer does).
public final class ServerStatistics: Sendable {
    private struct Counts {
        var connections = 0
        var webSockets = 0
    }

    private let counts = NIOLockedValueBox(Counts())

    public init() {}

    /// Accepted connections (HTTP or WebSocket) whose handling has not ended.
    public var openConnections: Int { counts.withLockedValue { $0.connections } }
    /// WebSocket connections whose endpoint is still running.
    public var openWebSockets: Int { counts.withLockedValue { $0.webSockets } }

    func connectionOpened() { counts.withLockedValue { $0.connections += 1 } }
    func connectionClosed() { counts.withLockedValue { $0.connections -= 1 } }
    func webSocketOpened() { counts.withLockedValue { $0.webSockets += 1 } }
    func webSocketClosed() { counts.withLockedValue { $0.webSockets -= 1 } }
}
