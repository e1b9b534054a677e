import NIOConcurrencyHelpers

/// Counts of what the server holds open, for logs, benchmarks and tests (a connection that
/// should have been closed shows up here, whatever the peer does).
public final class ServerStatistics: Sendable {
    private struct Counts {
        var connections = 0
        var webSockets = 0
    }

    private let counts = NIOLockedValueBox(Counts())
    /// Every connection's channel, weakly: one still alive after its connection closed is a
    /// leak (issue 20: each WebSocket connection kept its channel and ~6 KiB for good).
    private let channels = NIOLockedValueBox([WeakChannel]())

    // Only read and written under the lock; the channels themselves are Sendable.
    private struct WeakChannel: @unchecked Sendable {
        weak var channel: AnyObject?
    }

    public init() {}

    /// Accepted connections (HTTP or WebSocket) whose handling has not ended.
    public var openConnections: Int { counts.withLockedValue { $0.connections } }
    /// WebSocket connections whose endpoint is still running.
    public var openWebSockets: Int { counts.withLockedValue { $0.webSockets } }

    /// Channels of connections that are still referenced (open or leaked).
    public var liveChannels: Int {
        channels.withLockedValue { channels in
            channels.removeAll { $0.channel == nil }
            return channels.count
        }
    }

    func track(_ channel: AnyObject) {
        channels.withLockedValue { channels in
            // Pruned as it grows, so tracking costs a slot per live connection only.
            if channels.count >= 1024, channels.count.isMultiple(of: 1024) { channels.removeAll { $0.channel == nil } }
            channels.append(WeakChannel(channel: channel))
        }
    }

    func connectionOpened() { counts.withLockedValue { $0.connections += 1 } }
    func connectionClosed() { counts.withLockedValue { $0.connections -= 1 } }
    func webSocketOpened() { counts.withLockedValue { $0.webSockets += 1 } }
    func webSocketClosed() { counts.withLockedValue { $0.webSockets -= 1 } }
}
