import ArgumentParser
import Foundation
import Logging
import SyncProtocol
import SyncServer

/// `bucketfs serve`: run the Simperium-compatible sync server on a data directory.
struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run the Simperium-compatible sync server (auth API and streaming WebSocket).",
        discussion: """
            Clients connect to ws://HOST:PORT/sock/1/APP_ID/websocket and get tokens from \
            POST http://HOST:PORT/1/APP_ID/authorize/ (or /create/). All state lives in one SQLite \
            file in --data, or in a PostgreSQL database (--database, or BUCKETFS_DATABASE_URL) that \
            several nodes may share; stop with SIGINT or SIGTERM. GET /healthz answers while the \
            process runs, GET /readyz only while its store answers (for a load balancer's check); \
            --metrics-port serves Prometheus metrics apart from the public port.
            """
    )

    @Option(help: "Directory holding the server database (created if missing).")
    var data: String?

    @Option(help: "A PostgreSQL database instead of --data: postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE (default: $BUCKETFS_DATABASE_URL).")
    var database: String?

    @Option(
        name: .customLong("database-connections"),
        help: "Most connections this node opens to the --database (one of them listens for other nodes' changes; at least 3).")
    var databaseConnections: Int = PostgresServerStore.defaultMaximumConnections

    @Option(
        name: .customLong("database-wait"),
        help: "Seconds to keep trying at start while the --database does not answer, before giving up.")
    var databaseWait: Double = 60

    @Flag(name: .customLong("migrate-only"), help: "Bring the --database schema up to date, then exit without serving.")
    var migrateOnly = false

    @Option(help: "Interface to listen on.")
    var host: String = "127.0.0.1"

    @Option(help: "TCP port to listen on (0 picks a free port).")
    var port: Int = 8080

    @Option(name: .customLong("tls-cert"), help: "PEM certificate chain file; with --tls-key the server speaks TLS (wss://, https://).")
    var tlsCert: String?

    @Option(name: .customLong("tls-key"), help: "PEM private key file for --tls-cert.")
    var tlsKey: String?

    @Option(name: .customLong("app-id"), help: "Serve only this app id (repeatable). Default: any app id.")
    var appIDs: [String] = []

    @Option(name: .customLong("api-key"), help: "Require this X-Simperium-API-Key on the auth API. Default: any non-empty key.")
    var apiKey: String?

    @Option(
        name: .customLong("max-document-size"),
        help: "Largest entity in bytes of compact JSON; bigger changes get error 413. At most 4 MiB, the largest message a client may send.")
    var maxDocumentSize: Int = 1 << 20

    @Option(
        name: .customLong("request-timeout"),
        help: "Seconds an HTTP request may take from its first byte to its answer, and an HTTP connection may idle.")
    var requestTimeout: Double = 10

    @Option(
        name: .customLong("telepat"),
        help: "A JSON file declaring Telepat applications, their contexts and models; the server then also answers the Telepat API (README \"Telepat\").")
    var telepat: String?

    @Option(
        name: .customLong("apptimist"),
        help: "Also answer the Apptimist App-Server protocol as this service, on ws://HOST:PORT/SERVICE (README \"Apptimist server\").")
    var apptimist: String?

    @Option(
        name: .customLong("metrics-port"),
        help: "Serve Prometheus metrics at http://METRICS-ADDRESS:PORT/metrics, on a listener of its own (0 picks a free port). Default: no metrics.")
    var metricsPort: Int?

    @Option(name: .customLong("metrics-address"), help: "Interface of the --metrics-port listener.")
    var metricsAddress: String = "127.0.0.1"

    @Option(name: .customLong("shutdown-grace"), help: "Seconds connections get to close after SIGTERM/SIGINT before they are closed hard.")
    var shutdownGrace: Double = 5

    @Option(name: .customLong("log-level"), help: "trace, debug, info, notice, warning, error or critical.")
    var logLevel: String = "info"

    @Option(
        name: .customLong("log-format"),
        help: "text (one line per record, for people) or json (one JSON object per line, for log shippers: time, level, label, message, source and the record's metadata).")
    var logFormat: String = "text"

    func validate() throws {
        switch (data, databaseURL) {
        case (nil, nil): throw ValidationError("give --data DIR or --database postgres://USER@HOST:PORT/DATABASE")
        case (.some, .some): throw ValidationError("--data and --database exclude each other")
        default: break
        }
        if migrateOnly, databaseURL == nil { throw ValidationError("--migrate-only needs --database") }
        guard (PostgresServerStore.minimumConnections...10_000).contains(databaseConnections) else {
            throw ValidationError("--database-connections must be between \(PostgresServerStore.minimumConnections) and 10000")
        }
        guard databaseWait >= 0, databaseWait <= 86_400 else { throw ValidationError("--database-wait must be between 0 and 86400 seconds") }
        if let databaseURL {
            do { _ = try PostgresLocation(url: databaseURL) } catch { throw ValidationError("\(error)") }
        }
        guard (0...65535).contains(port) else { throw ValidationError("--port must be between 0 and 65535") }
        if let metricsPort, !(0...65535).contains(metricsPort) { throw ValidationError("--metrics-port must be between 0 and 65535") }
        guard (tlsCert == nil) == (tlsKey == nil) else { throw ValidationError("--tls-cert and --tls-key go together") }
        guard (1...Frame.defaultMaxClientBytes).contains(maxDocumentSize) else {
            throw ValidationError(
                "--max-document-size must be between 1 and \(Frame.defaultMaxClientBytes): a bigger document could not reach the server in one message")
        }
        guard requestTimeout > 0, requestTimeout <= 3600 else { throw ValidationError("--request-timeout must be between 0 and 3600 seconds") }
        guard shutdownGrace >= 0, shutdownGrace <= 3600 else { throw ValidationError("--shutdown-grace must be between 0 and 3600 seconds") }
        guard Logger.Level(rawValue: logLevel) != nil else { throw ValidationError("unknown --log-level \(logLevel)") }
        guard ["text", "json"].contains(logFormat) else { throw ValidationError("--log-format is text or json, not \(logFormat)") }
        if let apiKey, apiKey.isEmpty { throw ValidationError("--api-key must not be empty") }
        if let apptimist {
            guard ApptimistSettings.isValidName(apptimist) else {
                throw ValidationError("--apptimist: a service name is 1-64 of [A-Za-z0-9_-] and not 1, sock, socket.io, device, user, context or object")
            }
        }
    }

    func run() async throws {
        if logFormat == "json" { LoggingSystem.bootstrap { JSONLogHandler(label: $0) } }
        var logger = Logger(label: "bucketfs.server")
        logger.logLevel = Logger.Level(rawValue: logLevel) ?? .info
        // Use every descriptor allowed; connections are capped below the limit (issue 20).
        let descriptors = DescriptorLimit.raiseSoftToHard()
        logger.info("descriptor limit", metadata: [
            "limit": "\(descriptors)", "connection_cap": "\(DescriptorLimit.connectionCap)",
        ])
        let store = try await ServerBackend.open(
            data: data, databaseURL: databaseURL, databaseConnections: databaseConnections,
            databaseWait: .milliseconds(Int64(databaseWait * 1000)), logger: logger)
        if migrateOnly {
            // Opening migrated the schema.
            FileHandle.standardOutput.write(Data("database \(store.location) is up to date\n".utf8))
            store.close()
            return
        }
        var tls: ServerConfiguration.TLSFiles?
        if let tlsCert, let tlsKey {
            tls = ServerConfiguration.TLSFiles(certificateChainPath: tlsCert, privateKeyPath: tlsKey)
        }
        let requiredKey = apiKey
        let host = self.host
        let scheme = tls == nil ? ("ws", "http") : ("wss", "https")
        let databasePath = store.location
        var configuration = ServerConfiguration(
            host: host,
            port: port,
            appIDs: appIDs.isEmpty ? nil : Set(appIDs),
            apiKeyCheck: { _, key in requiredKey.map { $0 == key } ?? !key.isEmpty },
            maxDocumentSize: maxDocumentSize,
            tls: tls,
            onServerRunning: { port in
                let line = "bucketfs server listening on \(scheme.0)://\(host):\(port)/sock/1/<app_id>/websocket "
                    + "(auth API \(scheme.1)://\(host):\(port)/1/<app_id>/authorize/), data in \(databasePath); \(Version.text)\n"
                // Written unbuffered: scripts wait for this line to learn the port.
                FileHandle.standardOutput.write(Data(line.utf8))
            }
        )
        // /healthz and the Apptimist service key say it too.
        configuration.software = Version.text
        if let metricsPort {
            let metricsHost = metricsAddress
            configuration.metrics = ServerConfiguration.MetricsListener(host: metricsHost, port: metricsPort) { port in
                FileHandle.standardOutput.write(Data("bucketfs metrics on http://\(metricsHost):\(port)/metrics\n".utf8))
            }
        }
        configuration.requestTimeout = .milliseconds(Int64(requestTimeout * 1000))
        configuration.shutdownGrace = .milliseconds(Int64(shutdownGrace * 1000))
        if let telepat {
            // Device registrations and revoked tokens live beside the SQLite database; on PostgreSQL, in memory.
            let devices = data.map { URL(fileURLWithPath: $0).appendingPathComponent("telepat-devices.json").path }
            var settings = try TelepatSettings(file: telepat, devicesPath: databaseURL == nil ? devices : nil)
            settings.revokedTokensPath = databaseURL == nil ? data.map { URL(fileURLWithPath: $0).appendingPathComponent("telepat-revoked.json").path } : nil
            // Each application's objects live in its owner's account: it exists before anyone can register its name.
            do { try await store.prepareTelepat(settings) } catch {
                store.close()
                throw CommandError("--telepat \(telepat): \(error)")
            }
            configuration.telepat = settings
        }
        if let apptimist {
            configuration.apptimist = ApptimistSettings(service: apptimist)
            logger.info("Apptimist service \(apptimist) on \(scheme.0)://\(host):\(port)/\(apptimist)")
        }
        let app = try store.buildApplication(configuration: configuration, logger: logger)
        defer { store.close() }
        try await app.runService()
    }

    var databaseURL: String? { ServerDataOptions.databaseURL(data: data, database: database) }
}
