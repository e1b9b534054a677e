import Foundation

/// The user's configuration: named remotes (and optional per-directory mount settings) in
/// `$XDG_CONFIG_HOME/bucketfs/config.json`; tokens live apart in `credentials.json`, readable
/// only by its owner, so the config can be shared or shown without leaking them.
///
///     {
///       "remotes": { "work": { "server": "wss://sync.example.com", "appID": "my-app" },
///                    "team": { "server": "ws://a:4000", "servers": ["ws://a:4000", "ws://b:4000"], "appID": "x" } },
///       "mounts": { "/home/me/work": { "remote": "work", "buckets": ["notes", "todo"],
///                   "text": { "notes": { "field": "content", "touch": "modificationDate" } } } }
///     }
struct Config: Codable {
    struct Remote: Codable {
        /// The servers, tried in order: the nodes of one cluster. Saved as `server` (the first,
        /// which is all a config written before holds) and `servers` when there are more.
        var servers: [String]
        var appID: String
        var apiKey: String?
        var user: String?
        /// Where the auth API is when not on the streaming server (hosted Simperium).
        var authURL: String?
        /// Buckets shown as plain text, by bucket name (README, "Notes as plain text").
        var text: [String: TextViewSettings]?
        /// The protocol the servers speak; saved as `protocol` when not Simperium, so a config
        /// written before (which has none) reads as Simperium.
        var syncProtocol: SyncProtocolName
        /// Apptimist: the identity file and the service's key card (no token: the keys log in).
        var identity: String?
        var serviceKey: String?

        private enum CodingKeys: String, CodingKey {
            case server, servers, appID, apiKey, user, authURL, text, identity, serviceKey
            case syncProtocol = "protocol"
        }

        init(
            servers: [String], appID: String, apiKey: String?, user: String?, authURL: String?,
            text: [String: TextViewSettings]? = nil, syncProtocol: SyncProtocolName = .simperium
        ) {
            self.syncProtocol = syncProtocol
            self.servers = servers
            self.appID = appID
            self.apiKey = apiKey
            self.user = user
            self.authURL = authURL
            self.text = text
        }

        init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            let first = try container.decode(String.self, forKey: .server)
            servers = try container.decodeIfPresent([String].self, forKey: .servers) ?? [first]
            if servers.isEmpty { servers = [first] }
            appID = try container.decode(String.self, forKey: .appID)
            apiKey = try container.decodeIfPresent(String.self, forKey: .apiKey)
            user = try container.decodeIfPresent(String.self, forKey: .user)
            authURL = try container.decodeIfPresent(String.self, forKey: .authURL)
            text = try container.decodeIfPresent([String: TextViewSettings].self, forKey: .text)
            syncProtocol = try container.decodeIfPresent(SyncProtocolName.self, forKey: .syncProtocol) ?? .simperium
            identity = try container.decodeIfPresent(String.self, forKey: .identity)
            serviceKey = try container.decodeIfPresent(String.self, forKey: .serviceKey)
        }

        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(servers.first ?? "", forKey: .server)
            if servers.count > 1 { try container.encode(servers, forKey: .servers) }
            try container.encode(appID, forKey: .appID)
            try container.encodeIfPresent(apiKey, forKey: .apiKey)
            try container.encodeIfPresent(user, forKey: .user)
            try container.encodeIfPresent(authURL, forKey: .authURL)
            try container.encodeIfPresent(text, forKey: .text)
            if syncProtocol != .simperium { try container.encode(syncProtocol, forKey: .syncProtocol) }
            try container.encodeIfPresent(identity, forKey: .identity)
            try container.encodeIfPresent(serviceKey, forKey: .serviceKey)
        }
    }

    struct MountSettings: Codable {
        var remote: String?
        var buckets: [String]?
        var readOnly: Bool?
        /// Buckets shown as plain text, by bucket name (over the remote's).
        var text: [String: TextViewSettings]?
        /// `--history` at every mount here.
        var history: Bool?
    }

    var remotes: [String: Remote] = [:]
    var mounts: [String: MountSettings] = [:]

    init() {}

    /// Either part may be left out of the file (one with only `mounts` is a valid config).
    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        remotes = try container.decodeIfPresent([String: Remote].self, forKey: .remotes) ?? [:]
        mounts = try container.decodeIfPresent([String: MountSettings].self, forKey: .mounts) ?? [:]
    }

    static var directory: String {
        let environment = ProcessInfo.processInfo.environment
        let home = environment["HOME"] ?? NSHomeDirectory()
        return (environment["XDG_CONFIG_HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? home + "/.config") + "/bucketfs"
    }

    static var path: String { directory + "/config.json" }
    static var credentialsPath: String { directory + "/credentials.json" }

    static func load() throws -> Config {
        guard let data = FileManager.default.contents(atPath: path) else { return Config() }
        do {
            return try JSONDecoder().decode(Config.self, from: data)
        } catch {
            throw CommandError("\(path) is not a valid bucketfs config: \(error)")
        }
    }

    func save() throws {
        try Paths.createDirectory(Self.directory)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        try encoder.encode(self).write(to: URL(fileURLWithPath: Self.path), options: .atomic)
    }

    func remote(named name: String) throws -> Remote {
        guard let remote = remotes[name] else {
            let known = remotes.keys.sorted().joined(separator: ", ")
            throw CommandError("no remote named \(name) in \(Self.path)\(known.isEmpty ? "; add one with bucketfs login" : " (known: \(known))")")
        }
        return remote
    }
}

/// Access tokens by remote name, in a file only its owner can read (mode 0600).
enum CredentialStore {
    static func token(forRemote name: String) throws -> String {
        guard let data = FileManager.default.contents(atPath: Config.credentialsPath),
              let tokens = try? JSONDecoder().decode([String: String].self, from: data),
              let token = tokens[name] else {
            throw CommandError("no stored token for remote \(name): run bucketfs login \(name)")
        }
        return token
    }

    /// Saves `token` for remote `name`, keeping the others'. `bucketfs login` and every running
    /// mount of a Telepat remote (each renewal) write here: a lock makes each read-modify-write
    /// whole, and the file is replaced atomically, so a reader sees the old tokens or the new.
    static func store(token: String, forRemote name: String) throws {
        try Paths.createDirectory(Config.directory)
        let path = Config.credentialsPath
        let lock = open(path + ".lock", O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)
        guard lock >= 0 else { throw CommandError("cannot lock \(path): \(String(cString: strerror(errno)))") }
        defer { close(lock) }
        while flock(lock, LOCK_EX) != 0 {
            guard errno == EINTR else { throw CommandError("cannot lock \(path): \(String(cString: strerror(errno)))") }
        }
        var tokens: [String: String] = [:]
        if let data = FileManager.default.contents(atPath: path) {
            tokens = (try? JSONDecoder().decode([String: String].self, from: data)) ?? [:]
        }
        tokens[name] = token
        let data = try JSONEncoder().encode(tokens)
        // Created 0600 before any byte is written, so the token is never readable by others.
        let temporary = path + ".tmp"
        unlink(temporary)
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw CommandError("cannot write \(temporary): \(String(cString: strerror(errno)))") }
        let written = data.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        fsync(fd)
        close(fd)
        guard written == data.count, rename(temporary, path) == 0 else {
            unlink(temporary)
            throw CommandError("cannot write \(path): \(String(cString: strerror(errno)))")
        }
    }
}
