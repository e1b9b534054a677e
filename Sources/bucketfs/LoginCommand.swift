import ArgumentParser
import Foundation
import SyncProtocol

/// `bucketfs login`: get a token through the auth API and remember the remote by name.
struct Login: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Log in to a sync server and save it as a named remote (for mount --remote NAME).",
        discussion: """
            The remote (server, app id, user) goes to $XDG_CONFIG_HOME/bucketfs/config.json; the \
            token to credentials.json beside it, readable only by you. The password is read from \
            $BUCKETFS_PASSWORD or asked for; it is not stored. Tokens are never printed.
            """
    )

    @Argument(help: "A name for the remote, e.g. work.")
    var name: String

    @Option(help: "Server base URL, ws://host:port or wss://host (default: the remote's saved servers). Repeatable: the nodes of one cluster, tried in order.")
    var server: [String] = []

    @Option(name: .customLong("app-id"), help: "The app id (default: the remote's saved app id).")
    var appID: String?

    @Option(help: "The user name (default: the remote's saved user).")
    var user: String?

    @Option(name: .customLong("api-key"), help: "The X-Simperium-API-Key (default: the app id).")
    var apiKey: String?

    @Option(
        name: .customLong("auth-url"),
        help: "The auth API's base URL, http(s)://host[:port], when it is not on --server (default: the remote's saved one; https://auth.simperium.com for wss://api.simperium.com; else --server's own host).")
    var authURL: String?

    func run() async throws {
        var config = try Config.load()
        let saved = config.remotes[name]
        guard let servers = server.isEmpty ? saved?.servers : server, let appID = appID ?? saved?.appID, let user = user ?? saved?.user else {
            throw CommandError("a new remote needs --server, --app-id and --user")
        }
        guard servers.allSatisfy({ $0.hasPrefix("ws://") || $0.hasPrefix("wss://") }) else {
            throw CommandError("--server must start with ws:// or wss://")
        }
        let apiKey = apiKey ?? saved?.apiKey
        let authURL = authURL ?? (servers == saved?.servers ? saved?.authURL : nil)
        if let authURL, !AuthEndpoint.isHTTP(authURL) {
            throw CommandError("--auth-url must start with http:// or https://")
        }
        let password = try Credentials.readPassword(prompt: "Password for \(user): ")
        let token = try await AuthAPI.authorize(
            servers: servers, authURL: authURL, appID: appID, apiKey: apiKey ?? appID, username: user, password: password)
        try CredentialStore.store(token: token, forRemote: name)
        config.remotes[name] = Config.Remote(servers: servers, appID: appID, apiKey: apiKey, user: user, authURL: authURL)
        try config.save()
        print("bucketfs: logged in to \(servers.joined(separator: ", ")) as \(user); mount with: bucketfs mount --remote \(name) DIR")
    }
}
