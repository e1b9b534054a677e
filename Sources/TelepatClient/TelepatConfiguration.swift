import Foundation

/// How a Telepat engine reaches its server and which models it mirrors.
public struct TelepatConfiguration: Sendable {
    /// How the engine logs in.
    public enum Login: Sendable {
        /// `/user/login-password`; logged in again when the server refuses the token (401).
        case password(username: String, password: String)
        /// A JWT given by the user; it cannot be renewed once the server refuses it.
        case token(String)
    }

    /// The API's base URL, `http(s)://host[:port]`; the socket is at `/socket.io/` on the same host.
    public var serverURL: String
    public var appID: String
    /// The application's API key; requests carry its SHA-256 (`X-BLGREQ-SIGN`).
    public var apiKey: String
    public var login: Login
    /// The buckets to mirror, each `<context name>/<model>` (`BucketGroups` shows it two levels deep).
    public var buckets: [String]
    /// Reconnect delay after the first failure; doubles per failure up to `maximumBackoff`.
    public var initialBackoff: Duration = .milliseconds(500)
    public var maximumBackoff: Duration = .seconds(60)
    /// How long a connection must last to reset the delay.
    public var stableConnection: Duration = .seconds(10)
    /// A token is renewed this long before it expires (or halfway through a shorter life).
    public var tokenRenewalMargin: Duration = .seconds(300)
    /// Called with each new token the engine gets (a renewal or a login), so that whoever gave
    /// it the first one can keep the latest (a saved remote's credentials). Called on the
    /// engine's actor: it must not wait on the engine.
    public var tokenRenewed: (@Sendable (String) -> Void)?
    /// Largest socket message accepted.
    public var maxMessageBytes: Int = 16 * 1024 * 1024

    public init(serverURL: String, appID: String, apiKey: String, login: Login, buckets: [String]) {
        self.serverURL = serverURL
        self.appID = appID
        self.apiKey = apiKey
        self.login = login
        self.buckets = buckets
    }

    var baseURL: String {
        var base = serverURL
        while base.hasSuffix("/") { base.removeLast() }
        return base
    }

    /// `ws(s)://host[:port]/socket.io/?EIO=3&transport=websocket`.
    var socketURL: String {
        let base = baseURL
        let socketBase = base.hasPrefix("https://") ? "wss://" + base.dropFirst("https://".count) : "ws://" + base.dropFirst("http://".count)
        return socketBase + "/socket.io/?EIO=3&transport=websocket"
    }
}

/// A bucket's place in Telepat: `<context name>/<model>`.
struct TelepatBucket: Hashable, Sendable {
    let name: String
    let contextName: String
    let model: String

    init?(_ name: String) {
        let parts = name.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 2, !parts[0].isEmpty, !parts[1].isEmpty else { return nil }
        self.name = name
        contextName = String(parts[0])
        model = String(parts[1])
    }
}
