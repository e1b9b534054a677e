import Hummingbird
import HummingbirdCore
import HummingbirdTLS
import HummingbirdWebSocket
import Logging
import NIOSSL
import ServiceLifecycle

/// Builds the sync server (auth API + streaming WebSocket) over the SQLite `store`; `bucketfs
/// serve` and the tests share it. Throws when the TLS certificate or key cannot be loaded.
public func buildServerApplication(
    configuration: ServerConfiguration,
    store: ServerStore,
    logger: Logger = Logger(label: "bucketfs.server")
) throws -> some ApplicationProtocol {
    try buildServerApplication(configuration: configuration, storage: store, logger: logger)
}

/// Builds the sync server over any store behind the storage seam.
func buildServerApplication(
    configuration: ServerConfiguration,
    storage store: any ServerStorage,
    logger: Logger
) throws -> some ApplicationProtocol {
    let hub = SubscriptionHub(history: store.history.number, maxHeldBytes: configuration.maxCatchUpBytes)
    let statistics = configuration.statistics
    store.commitQueue.observeBatches { statistics.batchCommitted(changes: $0) }
    store.observeDatabase { statistics.database($0) }
    store.deliverForeignChanges { bucketID, change in hub.publish(bucketID: bucketID, change: change) }
    let router = Router(context: ServerRequestContext.self)
    let throttle = LoginThrottle(perUser: configuration.loginLimitPerUser, perAddress: configuration.loginLimitPerAddress)
    AuthRoutes(configuration: configuration, store: store, logger: logger, throttle: throttle).register(on: router)
    let shutdown = ShutdownState()
    HealthRoutes(store: store, shutdown: shutdown, statistics: configuration.statistics, software: configuration.software)
        .register(on: router)

    let endpoint = StreamingEndpoint(configuration: configuration, store: store, hub: hub, logger: logger)
    let webSocketRouter = Router(context: ServerRequestContext.self)
    if let settings = configuration.telepat {
        let telepat = TelepatFrontEnd(settings: settings, configuration: configuration, store: store, hub: hub, throttle: throttle, logger: logger)
        telepat.register(on: router)
        // One Engine.IO session per client, on long-polling, a WebSocket, or polling upgraded
        // to a WebSocket (socket.io-client 1.x, the Telepat SDK's, starts by polling).
        let sessions = TelepatSessions(limit: configuration.maxConnections ?? DescriptorLimit.connectionCap)
        let socket = TelepatSocket(frontEnd: telepat, sessions: sessions, pingInterval: configuration.pingInterval, pingTimeout: configuration.pingInterval)
        // A poll is answered (a noop, if nothing else) well within the HTTP request deadline.
        let longPoll = min(configuration.pingInterval, configuration.requestTimeout / 2)
        TelepatPolling(frontEnd: telepat, sessions: sessions, pingInterval: configuration.pingInterval, pingTimeout: configuration.pingInterval, longPoll: longPoll)
            .register(on: router)
        webSocketRouter.ws("/socket.io") { request, _ in socket.accepts(request) ? .upgrade([:]) : .dontUpgrade } onUpgrade: { inbound, outbound, context in
            context.requestContext.releaseWebSocket()
            try await socket.run(inbound: inbound, outbound: outbound, context: context)
        }
    }
    if let settings = configuration.apptimist {
        guard let apptimistStorage = store.apptimist else { throw ApptimistStoreError.unsupportedStore }
        ApptimistService(settings: settings, configuration: configuration, storage: apptimistStorage, logger: logger)
            .register(router: router, webSocketRouter: webSocketRouter)
    }
    webSocketRouter.ws("/sock/1/:app_id/websocket") { _, context in
        let appID = context.parameters.get("app_id") ?? ""
        guard configuration.accepts(appID: appID) else {
            let activity = try? await context.channel.pipeline.handler(type: ConnectionActivity.self).get()
            activity?.answerRefusedUpgradeWithNotFound(on: context.channel.eventLoop)
            return .dontUpgrade
        }
        return .upgrade([:])
    } onUpgrade: { inbound, outbound, context in
        context.requestContext.releaseWebSocket()
        let appID = context.requestContext.parameters.get("app_id") ?? ""
        try await endpoint.run(appID: appID, inbound: inbound, outbound: outbound, context: context)
    }

    let webSocketConfiguration = WebSocketServerConfiguration(
        maxFrameSize: configuration.maxFrameSize,
        // Pings are the connection watchdog's (`WebSocketWatchdog`): the library's ping loop
        // waits on backpressure, so it never timed out a peer that stopped reading (issue 20).
        autoPing: .disabled,
        // RFC 6455 §8.1: a text message that is not UTF-8 fails the connection (1007).
        validateUTF8: true
    )
    let webSocketResponder = webSocketRouter.buildResponder()
    let tlsConfiguration = try configuration.tls.map(makeTLSConfiguration)
    let cap = ConnectionCap(limit: configuration.maxConnections ?? DescriptorLimit.connectionCap, statistics: configuration.statistics)
    let server = HTTPServerBuilder { responder in
        let http = HTTP1WebSocketUpgradeChannel(
            responder: responder, webSocketResponder: webSocketResponder, configuration: .init(ws: webSocketConfiguration)
        )
        let guarded = GuardedChildChannel(
            base: http, requestTimeout: configuration.requestTimeout, shutdownGrace: configuration.shutdownGrace,
            statistics: configuration.statistics,
            cap: cap, shutdown: shutdown
        )
        guard let tlsConfiguration else { return guarded }
        return try TLSChannel(guarded, tlsConfiguration: tlsConfiguration)
    }
    let onServerRunning = configuration.onServerRunning
    var services: [any Service] = []
    if let metrics = configuration.metrics { services.append(metricsApplication(metrics, statistics: statistics, logger: logger)) }
    return Application(
        router: router,
        server: server,
        configuration: .init(address: .hostname(configuration.host, port: configuration.port), serverName: "bucketfs"),
        services: services,
        onServerRunning: { channel in
            await onServerRunning?(channel.localAddress?.port ?? configuration.port)
        },
        logger: logger
    )
}

/// `GET /metrics` on a listener of its own, run beside the server (and stopped with it).
private func metricsApplication(
    _ listener: ServerConfiguration.MetricsListener, statistics: ServerStatistics, logger: Logger
) -> some Service {
    let router = Router()
    router.get("/metrics") { _, _ in
        Response(
            status: .ok,
            headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
            body: .init(byteBuffer: ByteBuffer(string: statistics.prometheusText())))
    }
    let onRunning = listener.onRunning
    return Application(
        router: router,
        configuration: .init(address: .hostname(listener.host, port: listener.port), serverName: "bucketfs-metrics"),
        onServerRunning: { channel in await onRunning?(channel.localAddress?.port ?? listener.port) },
        logger: logger
    )
}

private func makeTLSConfiguration(_ files: ServerConfiguration.TLSFiles) throws -> TLSConfiguration {
    let chain = try NIOSSLCertificate.fromPEMFile(files.certificateChainPath).map { NIOSSLCertificateSource.certificate($0) }
    let key = try NIOSSLPrivateKey(file: files.privateKeyPath, format: .pem)
    return TLSConfiguration.makeServerConfiguration(certificateChain: chain, privateKey: .privateKey(key))
}
