import Foundation
import PostgresNIO

/// Where a PostgreSQL database is: `postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE`, with an
/// optional `?sslmode=disable|prefer|require` (default: disable, as on loopback).
public struct PostgresLocation: Sendable, Hashable, CustomStringConvertible {
    public enum TLSMode: String, Sendable, Hashable { case disable, prefer, require }

    public var host: String
    public var port: Int
    public var username: String
    public var password: String?
    public var database: String
    public var tls: TLSMode

    /// Parses a `postgres://` (or `postgresql://`) URL; throws a message naming what is wrong.
    public init(url text: String) throws {
        // Messages show the URL without its password.
        let shown = URLComponents(string: text).map { components -> String in
            var redacted = components
            if redacted.password != nil { redacted.password = "***" }
            return redacted.string ?? "postgres URL"
        } ?? "postgres URL"
        guard let components = URLComponents(string: text), let scheme = components.scheme?.lowercased(),
              scheme == "postgres" || scheme == "postgresql"
        else { throw SyncServerError.databaseURL(shown, "expected postgres://USER@HOST:PORT/DATABASE") }
        guard let host = components.host, !host.isEmpty else { throw SyncServerError.databaseURL(shown, "no host") }
        guard let user = components.user, !user.isEmpty else { throw SyncServerError.databaseURL(shown, "no user") }
        let database = String(components.path.drop(while: { $0 == "/" }))
        guard !database.isEmpty, !database.contains("/") else { throw SyncServerError.databaseURL(shown, "no database name") }
        let port = components.port ?? 5432
        guard (1...65535).contains(port) else { throw SyncServerError.databaseURL(shown, "bad port") }
        var tls = TLSMode.disable
        for item in components.queryItems ?? [] {
            guard item.name == "sslmode" else { throw SyncServerError.databaseURL(shown, "unknown parameter \(item.name)") }
            guard let mode = item.value.flatMap(TLSMode.init(rawValue:)) else {
                throw SyncServerError.databaseURL(shown, "sslmode must be disable, prefer or require")
            }
            tls = mode
        }
        self.host = host
        self.port = port
        self.username = user.removingPercentEncoding ?? user
        self.password = components.password.map { $0.removingPercentEncoding ?? $0 }
        self.database = database.removingPercentEncoding ?? database
        self.tls = tls
    }

    /// The URL without its password, for logs and messages.
    public var description: String {
        "postgres://\(username)@\(host):\(port)/\(database)"
    }

    func clientConfiguration(maximumConnections: Int) -> PostgresClient.Configuration {
        let tlsSetting: PostgresClient.Configuration.TLS
        switch tls {
        case .disable: tlsSetting = .disable
        case .prefer: tlsSetting = .prefer(.makeClientConfiguration())
        case .require: tlsSetting = .require(.makeClientConfiguration())
        }
        var configuration = PostgresClient.Configuration(
            host: host, port: port, username: username, password: password, database: database, tls: tlsSetting
        )
        configuration.options.maximumConnections = maximumConnections
        configuration.options.connectTimeout = .seconds(5)
        return configuration
    }
}
