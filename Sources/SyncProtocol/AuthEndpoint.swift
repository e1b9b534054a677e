/// Where a streaming server's auth API is (`POST /1/{app_id}/authorize/`, DESIGN.md "Protocol
/// facts"). A self-hosted server, bucketfs's own included, serves both APIs on one host; hosted
/// Simperium serves streaming from `api.simperium.com` and auth from `auth.simperium.com`.
public enum AuthEndpoint {
    public static let hostedStreamingHost = "api.simperium.com"
    public static let hostedAuthBase = "https://auth.simperium.com"

    /// The auth API's HTTP base: `authURL` when given; the hosted auth host for hosted
    /// streaming; else the streaming server itself (ws -> http, wss -> https).
    public static func base(streamingServer: String, authURL: String?) -> String {
        if let authURL, !authURL.isEmpty { return trimmed(authURL) }
        if host(of: streamingServer) == hostedStreamingHost { return hostedAuthBase }
        var base = streamingServer
        if base.hasPrefix("ws://") { base = "http://" + base.dropFirst(5) }
        if base.hasPrefix("wss://") { base = "https://" + base.dropFirst(6) }
        return trimmed(base)
    }

    /// Whether `url` can be an auth base (`--auth-url`): http or https.
    public static func isHTTP(_ url: String) -> Bool {
        url.hasPrefix("http://") || url.hasPrefix("https://")
    }

    /// The authorize URL of an app under an auth base.
    public static func authorizeURL(base: String, appID: String) -> String {
        "\(trimmed(base))/1/\(appID)/authorize/"
    }

    /// The host of `scheme://host[:port][/path]`, lowercased; nil without a scheme.
    static func host(of url: String) -> String? {
        guard let schemeEnd = url.firstRange(of: "://") else { return nil }
        let rest = url[schemeEnd.upperBound...]
        let authority = rest.prefix { $0 != "/" && $0 != "?" && $0 != "#" }
        let hostPart = authority.split(separator: "@").last.map { $0.prefix { $0 != ":" } } ?? ""
        return hostPart.isEmpty ? nil : hostPart.lowercased()
    }

    private static func trimmed(_ url: String) -> String {
        var url = url
        while url.hasSuffix("/") { url.removeLast() }
        return url
    }
}
