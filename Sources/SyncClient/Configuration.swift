import Foundation
import SyncProtocol

/// How a sync client connects and paces itself.
public struct SyncClientConfiguration: Sendable {
    /// Server base URLs, `ws://host:port` or `wss://host` (the `/sock/1/{app}/websocket` path is
    /// added), in the order they are tried. Several are the nodes of one cluster (one database),
    /// so a change version one of them gave is good at the others: when the connection to one
    /// fails or ends, the client goes on at the next at once, and waits `initialBackoff` (and
    /// more) only after a whole round of them failed.
    public var servers: [String]
    /// The first server (the only one, for most clients).
    public var serverURL: String { servers.first ?? "" }
    /// The Simperium app id.
    public var appID: String
    /// Returns the access token; called at each (re)authorization, so it may refresh it (401).
    public var token: @Sendable () async throws -> String
    /// The buckets to sync, one channel each (channel number = position).
    public var buckets: [String]
    /// Sent as `clientid` in `init`; the server dedups changes by clientid + ccid, so keep it stable.
    public var clientID: String
    /// Idle time before a heartbeat is sent (spec: 20 s).
    public var heartbeatInterval: Duration = .seconds(20)
    /// How long a heartbeat may go unanswered before the connection counts as dead.
    public var heartbeatTimeout: Duration = .seconds(10)
    /// Reconnect delay after the first failure; doubles per failure up to `maximumBackoff`.
    public var initialBackoff: Duration = .milliseconds(500)
    public var maximumBackoff: Duration = .seconds(60)
    /// How long an authorized connection must last to reset the delay. One that ends sooner
    /// counts as a failed attempt, so that a server closing every connection (over something
    /// the client sends each time) is not reconnected to twice a second for ever.
    public var stableConnection: Duration = .seconds(10)
    /// How long a connection may take to open (TCP connect and the WebSocket upgrade) before the
    /// attempt is given up and the next one made: a server that accepted the connection but
    /// stopped (SIGSTOP, a hung process) answers nothing, and a connection reset before the
    /// upgrade's answer was seen to leave the upgrade waiting for ever.
    public var openingTimeout: Duration = .seconds(15)
    /// Index page size for the first sync (`i:1:<mark>::<limit>`).
    public var indexPageLimit: Int = 1000
    /// Embed the first command in `init` (`cmd`) to save a round trip.
    public var sendCommandInInit: Bool = false
    /// Largest message accepted from the server.
    public var maxMessageBytes: Int = 16 * 1024 * 1024
    /// Largest `c:` frame sent, in bytes. Changes go out in as many frames as keep each within
    /// it. A change too large for a frame of its own is not sent: it is kept locally, refused
    /// for its size (`rejected:413`), as the server's 413 would leave it, so that it cannot make
    /// the server close every connection that carries it. The default is what bucketfs's server
    /// accepts.
    public var maxChangeFrameBytes: Int = Frame.defaultMaxClientBytes
    /// Changes written on one connection and not answered yet, at most. A burst of saves past
    /// it waits in the store (queued, so later saves of a file still coalesce) and goes out as
    /// the server's answers make room, many to a frame. Without a bound, a burst faster than
    /// the client can take the answers in fills the server's buffer for this connection, and
    /// the server drops it.
    public var maxChangesInFlight: Int = 512
    /// Times a change refused with 405 is rebased and resent before it is sent as a whole object.
    public var badVersionRetries: Int = 1

    public init(
        serverURL: String, appID: String, buckets: [String], clientID: String,
        token: @escaping @Sendable () async throws -> String
    ) {
        self.init(servers: [serverURL], appID: appID, buckets: buckets, clientID: clientID, token: token)
    }

    /// A client of a cluster: `servers` are tried in order (see `servers`); one token serves them all.
    public init(
        servers: [String], appID: String, buckets: [String], clientID: String,
        token: @escaping @Sendable () async throws -> String
    ) {
        self.servers = servers
        self.appID = appID
        self.buckets = buckets
        self.clientID = clientID
        self.token = token
    }

    /// `ws(s)://host[:port]/sock/1/{app_id}/websocket` of `server`.
    func socketURL(of server: String) -> String {
        var base = server
        while base.hasSuffix("/") { base.removeLast() }
        return "\(base)/sock/1/\(appID)/websocket"
    }
}
