import SyncProtocol

/// Everything `buildServerApplication` needs besides the store: where to listen and what to accept.
public struct ServerConfiguration: Sendable {
    /// Interface to bind, e.g. "127.0.0.1" or "0.0.0.0".
    public var host: String
    /// TCP port; 0 picks a free one (read it back through `onServerRunning`).
    public var port: Int
    /// App ids accepted in `/1/{app_id}/...` and `/sock/1/{app_id}/websocket`; nil accepts any.
    public var appIDs: Set<String>?
    /// Decides whether an `X-Simperium-API-Key` header value is accepted for an app id.
    public var apiKeyCheck: @Sendable (_ appID: String, _ apiKey: String) -> Bool
    /// Largest entity, in bytes of compact JSON; a change producing a bigger one gets 413.
    public var maxDocumentSize: Int
    /// Largest WebSocket message (reassembled from frames) the server accepts.
    public var maxFrameSize: Int
    /// Versions kept per entity for `e:key.v` and for rebasing changes made on a stale `sv`.
    public var historyPerEntity: Int
    /// Changes kept per bucket for `cv` catch-up; older ones are compacted away (answer `cv:?`).
    public var changeLogRetention: Int
    /// Upper bound of the `limit` of one `i` page.
    public var maxIndexPageSize: Int
    /// Page size used when an `i` command gives no limit.
    public var defaultIndexPageSize: Int
    /// Bytes of not-yet-sent frames a connection may hold before it is closed as a slow reader.
    public var maxOutboundBufferBytes: Int
    /// Body size limit of the HTTP auth API.
    public var maxAuthRequestBodySize: Int
    /// PEM certificate chain and private key files; both set means the server speaks TLS.
    public var tls: TLSFiles?
    /// How long an HTTP request may take from its first byte to its answer, and an HTTP
    /// connection may idle (after accept or an answer) before it is closed.
    public var requestTimeout: Duration = .seconds(10)
    /// How long a WebSocket may stay open without a successful `init`.
    public var initTimeout: Duration = .seconds(10)
    /// How long changes committed after a channel's `auth` wait for its first command: a `cv:`
    /// answered in time carries them in its catch-up, in cv order; a channel that only listens
    /// gets them this much later.
    public var broadcastHoldAfterAuth: Duration = .seconds(2)
    /// A WebSocket is pinged this often; one silent (not even a pong) for a whole interval
    /// after a ping is closed, so a dead peer goes within two intervals.
    public var pingInterval: Duration = .seconds(30)
    /// How long a WebSocket's writes may stay blocked (the peer's receive window full) before
    /// the connection is closed, whether or not the bucket has traffic.
    public var stalledWriteTimeout: Duration = .seconds(30)
    /// After a graceful shutdown begins (SIGTERM, SIGINT), connections still open this much
    /// later are closed hard.
    public var shutdownGrace: Duration = .seconds(5)
    /// Failed logins allowed per username before 429 (Retry-After), and how fast they come back.
    public var loginLimitPerUser = LoginLimit(burst: 10, refill: .seconds(6))
    /// Failed logins and account creations allowed per client address.
    public var loginLimitPerAddress = LoginLimit(burst: 30, refill: .seconds(2))
    /// Connections open at once at most; nil: the descriptor limit less what the store and
    /// the runtime need (`DescriptorLimit.connectionCap`, read when the server is built).
    public var maxConnections: Int?
    /// Where the server counts what it holds open.
    public var statistics = ServerStatistics()
    /// Which build answers (`bucketfs serve`: `bucketfs 0.9.0 (commit 839ed00)`), said by
    /// `/healthz` and the Apptimist service key document (issue 41); nil: neither says it.
    public var software: String?
    /// Called once the server listens, with the bound port (useful with port 0).
    public var onServerRunning: (@Sendable (_ port: Int) async -> Void)?
    /// The Telepat applications to answer for (`bucketfs serve --telepat FILE`); nil: no Telepat API.
    public var telepat: TelepatSettings?
    /// The Apptimist App-Server to answer for (`bucketfs serve --apptimist SERVICE`); nil: none.
    public var apptimist: ApptimistSettings?
    /// Where `/metrics` is served (`bucketfs serve --metrics-port`); nil: nowhere.
    public var metrics: MetricsListener?
    /// Test hook: when it returns a code, the change is answered with that error and not applied.
    public var forcedChangeError: (@Sendable (ChangeRequest) -> Int?)?

    /// A listener of its own for `GET /metrics` (Prometheus text), apart from the public port,
    /// so what the server counts is not published to its clients.
    public struct MetricsListener: Sendable {
        public var host: String
        /// 0 picks a free port (read it back through `onRunning`).
        public var port: Int
        public var onRunning: (@Sendable (_ port: Int) async -> Void)?

        public init(host: String = "127.0.0.1", port: Int, onRunning: (@Sendable (_ port: Int) async -> Void)? = nil) {
            self.host = host
            self.port = port
            self.onRunning = onRunning
        }
    }

    /// Paths of a PEM certificate chain and its private key.
    public struct TLSFiles: Sendable, Hashable {
        public var certificateChainPath: String
        public var privateKeyPath: String

        public init(certificateChainPath: String, privateKeyPath: String) {
            self.certificateChainPath = certificateChainPath
            self.privateKeyPath = privateKeyPath
        }
    }

    /// A configuration for a local server: any app id, any non-empty API key.
    public init(
        host: String = "127.0.0.1",
        port: Int = 8080,
        appIDs: Set<String>? = nil,
        apiKeyCheck: @escaping @Sendable (_ appID: String, _ apiKey: String) -> Bool = { _, key in !key.isEmpty },
        maxDocumentSize: Int = 1 << 20,
        maxFrameSize: Int = Frame.defaultMaxClientBytes,
        historyPerEntity: Int = 60,
        changeLogRetention: Int = 10_000,
        maxIndexPageSize: Int = 1000,
        defaultIndexPageSize: Int = 100,
        maxOutboundBufferBytes: Int = 16 << 20,
        maxAuthRequestBodySize: Int = 64 << 10,
        tls: TLSFiles? = nil,
        onServerRunning: (@Sendable (_ port: Int) async -> Void)? = nil,
        forcedChangeError: (@Sendable (ChangeRequest) -> Int?)? = nil
    ) {
        self.host = host
        self.port = port
        self.appIDs = appIDs
        self.apiKeyCheck = apiKeyCheck
        self.maxDocumentSize = maxDocumentSize
        self.maxFrameSize = maxFrameSize
        self.historyPerEntity = max(1, historyPerEntity)
        self.changeLogRetention = max(1, changeLogRetention)
        self.maxIndexPageSize = max(1, maxIndexPageSize)
        self.defaultIndexPageSize = max(1, min(defaultIndexPageSize, maxIndexPageSize))
        self.maxOutboundBufferBytes = maxOutboundBufferBytes
        self.maxAuthRequestBodySize = maxAuthRequestBodySize
        self.tls = tls
        self.onServerRunning = onServerRunning
        self.forcedChangeError = forcedChangeError
    }

    /// Diff bytes a `cv` catch-up may carry; a longer one is answered `cv:?` (the client then
    /// reloads the index). Half the outbound buffer, so a catch-up never overflows it.
    var maxCatchUpBytes: Int { maxOutboundBufferBytes / 2 }

    /// Entity bytes after which an index page ends early (with a mark). Half a client message
    /// (the server sends nothing larger than it accepts, issue 20), and a quarter of the
    /// outbound buffer; one entity (at most `maxDocumentSize`) may pass it so paging progresses.
    var maxIndexPageDataBytes: Int { min(maxOutboundBufferBytes / 4, maxFrameSize / 2) }

    /// Whether `appID` is served.
    public func accepts(appID: String) -> Bool {
        guard !appID.isEmpty else { return false }
        return appIDs.map { $0.contains(appID) } ?? true
    }
}
