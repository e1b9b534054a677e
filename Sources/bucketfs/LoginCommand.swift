import ArgumentParser
import Foundation
import ApptimistCrypto
import SyncProtocol
import TelepatClient

/// `bucketfs login`: get a token through the auth API and remember the remote by name.
struct Login: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Log in to a sync server and save it as a named remote (for mount --remote NAME).",
        discussion: """
            The remote (server, app id, user) goes to $XDG_CONFIG_HOME/bucketfs/config.json; the \
            token to credentials.json beside it, readable only by you. The password is read from \
            $BUCKETFS_PASSWORD or asked for; it is not stored. Tokens are never printed.

            A Telepat remote (--protocol telepat --server http(s)://HOST[:PORT] --app-id ID \
            --api-key KEY --user U) saves the JWT the same way; mounts renew it while they run, \
            and when the saved one has expired, mount asks for bucketfs login NAME again.
            """
    )

    @Argument(help: "A name for the remote, e.g. work.")
    var name: String

    @Option(name: .customLong("protocol"), help: "The sync protocol of --server: simperium or telepat (default: the remote's saved one, else simperium).")
    var syncProtocol: SyncProtocolName?

    @Option(help: "Server base URL, ws://host:port or wss://host (default: the remote's saved servers). Repeatable: the nodes of one cluster, tried in order.")
    var server: [String] = []

    @Option(name: .customLong("app-id"), help: "The app id (default: the remote's saved app id).")
    var appID: String?

    @Option(help: "The user name (default: the remote's saved user).")
    var user: String?

    @Option(help: "An Apptimist remote: the identity file (kept by path; its keys log in, no password).")
    var identity: String?

    @Option(name: .customLong("service-key"), help: "An Apptimist remote: the service's key document file (bucketfs apptimist service-key), kept by path.")
    var serviceKey: String?

    @Option(name: .customLong("api-key"), help: "The X-Simperium-API-Key (default: the app id).")
    var apiKey: String?

    @Option(
        name: .customLong("auth-url"),
        help: "The auth API's base URL, http(s)://host[:port], when it is not on --server (default: the remote's saved one; https://auth.simperium.com for wss://api.simperium.com; else --server's own host).")
    var authURL: String?

    func run() async throws {
        var config = try Config.load()
        let saved = config.remotes[name]
        if (syncProtocol ?? saved?.syncProtocol) == .apptimist { return try saveApptimistRemote(&config, saved: saved) }
        guard let servers = server.isEmpty ? saved?.servers : server, let appID = appID ?? saved?.appID, let user = user ?? saved?.user else {
            throw CommandError("a new remote needs --server, --app-id and --user")
        }
        let syncProtocol = syncProtocol ?? saved?.syncProtocol ?? .simperium
        let apiKey = apiKey ?? saved?.apiKey
        let authURL = authURL ?? (servers == saved?.servers ? saved?.authURL : nil)
        let token: String
        switch syncProtocol {
        case .simperium:
            guard servers.allSatisfy({ $0.hasPrefix("ws://") || $0.hasPrefix("wss://") }) else {
                throw CommandError("--server must start with ws:// or wss://")
            }
            if let authURL, !AuthEndpoint.isHTTP(authURL) {
                throw CommandError("--auth-url must start with http:// or https://")
            }
            let password = try Credentials.readPassword(prompt: "Password for \(user): ")
            token = try await AuthAPI.authorize(
                servers: servers, authURL: authURL, appID: appID, apiKey: apiKey ?? appID, username: user, password: password)
        case .apptimist:
            throw CommandError("an Apptimist remote is saved without a login")
        case .telepat:
            guard servers.count == 1, AuthEndpoint.isHTTP(servers[0]) else {
                throw CommandError("a Telepat remote has one --server, starting with http:// or https://")
            }
            guard let apiKey else { throw CommandError("a Telepat remote needs --api-key (the application's API key)") }
            guard authURL == nil else { throw CommandError("--auth-url is for Simperium; Telepat logs in on --server") }
            let password = try Credentials.readPassword(prompt: "Password for \(user): ")
            do {
                token = try await TelepatLogin.token(serverURL: servers[0], appID: appID, apiKey: apiKey, username: user, password: password)
            } catch {
                throw CommandError("cannot log in to \(servers[0]) as \(user): \(error)")
            }
        }
        try CredentialStore.store(token: token, forRemote: name)
        config.remotes[name] = Config.Remote(
            servers: servers, appID: appID, apiKey: apiKey, user: user, authURL: authURL, text: saved?.text, syncProtocol: syncProtocol)
        try config.save()
        print("bucketfs: logged in to \(servers.joined(separator: ", ")) as \(user); mount with: bucketfs mount --remote \(name) DIR")
    }

    /// An Apptimist remote: the server, the identity file (by absolute path) and the service's
    /// card, checked now; nothing secret is copied (the identity file stays where it is, 0600).
    private func saveApptimistRemote(_ config: inout Config, saved: Config.Remote?) throws {
        guard let server = server.first ?? saved?.servers.first, server.hasPrefix("ws://") else {
            throw CommandError("an Apptimist remote needs --server ws://HOST[:PORT]/SERVICE")
        }
        guard let identity = identity.map(Paths.absolute) ?? saved?.identity, let serviceKey = serviceKey.map(Paths.absolute) ?? saved?.serviceKey
        else {
            throw CommandError("an Apptimist remote needs --identity FILE and --service-key FILE")
        }
        do {
            _ = try ApptimistIdentity(file: identity)
            _ = try ApptimistServiceKey(json: FileManager.default.contents(atPath: serviceKey) ?? Data(serviceKey.utf8))
        } catch {
            throw CommandError("\(error)")
        }
        var remote = Config.Remote(servers: [server], appID: "", apiKey: nil, user: nil, authURL: nil, syncProtocol: .apptimist)
        remote.identity = identity
        remote.serviceKey = serviceKey
        config.remotes[name] = remote
        try config.save()
        print("bucketfs: saved the Apptimist remote \(name) (\(server)); mount with: bucketfs mount --remote \(name) DIR")
    }
}
