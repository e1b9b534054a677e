import Crypto
import Foundation
import JSONDiff
import SyncProtocol

/// The Telepat applications a server answers for, read from the file `bucketfs serve --telepat`
/// names:
///
///     {"applications": [{"id": "app1", "api_key": "secret", "owner": "optional username",
///                        "contexts": [{"id": "c1", "name": "Tasks", "models": ["task", "note"]}]}],
///      "jwt_secret": "optional; without it tokens end with the process",
///      "token_lifetime": 3600}
///
/// An application's objects are shared by all its users, as on Telepat: a Telepat object of
/// context `c1` and model `task` is the entity `<object id>` of the bucket `c1.task`
/// (`bucketName`) of the application's owner, the account whose Simperium clients sync the same
/// objects. The owner is the user `owner` names (it must exist), or else `telepat:<app id>`,
/// created with a random password when missing (`bucketfs user token` gives a Simperium token).
public struct TelepatSettings: Sendable {
    public struct Context: Sendable, Hashable {
        public var id: String
        public var name: String
        public var models: [String]
    }

    public struct Application: Sendable {
        public var id: String
        public var apiKey: String
        public var contexts: [Context]
        /// The account holding the application's objects (see above).
        public var owner: String
        /// Whether the settings named the owner (then it must exist) or it is the default one
        /// (then the server creates it).
        public var ownerDeclared: Bool

        public init(id: String, apiKey: String, contexts: [Context], owner: String? = nil) {
            self.id = id
            self.apiKey = apiKey
            self.contexts = contexts
            self.owner = owner ?? Self.defaultOwner(applicationID: id)
            ownerDeclared = owner != nil
        }

        /// The owner of an application whose settings name none.
        public static func defaultOwner(applicationID: String) -> String { "telepat:\(applicationID)" }

        /// What clients send as `X-BLGREQ-SIGN`: the hex SHA-256 of the API key.
        public var sign: String { SHA256.hash(data: Array(apiKey.utf8)).map { String(format: "%02x", $0) }.joined() }

        func context(_ id: String) -> Context? { contexts.first { $0.id == id } }
    }

    public var applications: [String: Application]
    /// The HS256 key of the JWTs the server issues.
    public var jwtSecret: [UInt8]
    /// How long a JWT is valid, in seconds (Telepat: one hour).
    public var tokenLifetime: Int64 = 3600
    /// Where device registrations are kept (a JSON file); nil keeps them in memory only.
    public var devicesPath: String?
    /// Where the tokens revoked by `/user/logout` are kept (a JSON file); nil: in memory only.
    public var revokedTokensPath: String?

    public init(applications: [Application], jwtSecret: [UInt8]? = nil, devicesPath: String? = nil) {
        self.applications = Dictionary(applications.map { ($0.id, $0) }, uniquingKeysWith: { first, _ in first })
        self.jwtSecret = jwtSecret ?? (0..<32).map { _ in UInt8.random(in: 0...255) }
        self.devicesPath = devicesPath
    }

    /// Why a settings file was refused.
    public struct Invalid: Error, CustomStringConvertible {
        public var description: String
    }

    /// Reads a settings file (the shape above).
    public init(file path: String, devicesPath: String? = nil) throws {
        let bytes: Data
        do {
            bytes = try Data(contentsOf: URL(fileURLWithPath: path))
        } catch {
            throw Invalid(description: "cannot read Telepat settings \(path): \(error.localizedDescription)")
        }
        try self.init(parsing: Array(bytes), devicesPath: devicesPath)
    }

    public init(parsing bytes: [UInt8], devicesPath: String? = nil) throws {
        guard let json = try? JSONValue(parsing: bytes), let root = json.objectValue else {
            throw Invalid(description: "Telepat settings: not a JSON object")
        }
        var applications: [Application] = []
        for app in root["applications"]?.arrayValue ?? [] {
            guard let id = app["id"]?.stringValue, !id.isEmpty, let key = app["api_key"]?.stringValue, !key.isEmpty else {
                throw Invalid(description: "Telepat settings: every application needs a non-empty id and api_key")
            }
            var contexts: [Context] = []
            for context in app["contexts"]?.arrayValue ?? [] {
                guard let contextID = context["id"]?.stringValue, Self.isName(contextID) else {
                    throw Invalid(description: "Telepat settings: context ids are 1-40 of [A-Za-z0-9_-] (application \(id))")
                }
                let models = (context["models"]?.arrayValue ?? []).compactMap(\.stringValue)
                for model in models where !Self.isName(model) || Self.bucketName(context: contextID, model: model).count > 64 {
                    throw Invalid(description: "Telepat settings: model '\(model)' of context \(contextID): names are [A-Za-z0-9_-], context.model at most 64 bytes")
                }
                contexts.append(Context(id: contextID, name: context["name"]?.stringValue ?? contextID, models: models))
            }
            var owner: String?
            if let declared = app["owner"], declared != .null {
                guard let name = declared.stringValue, Username.isValid(name) else {
                    throw Invalid(description: "Telepat settings: the owner of application \(id) is not a valid username")
                }
                owner = name
            }
            applications.append(Application(id: id, apiKey: key, contexts: contexts, owner: owner))
        }
        guard !applications.isEmpty else { throw Invalid(description: "Telepat settings: no applications") }
        self.init(applications: applications, jwtSecret: root["jwt_secret"]?.stringValue.map { Array($0.utf8) }, devicesPath: devicesPath)
        if let lifetime = root["token_lifetime"] {
            guard case .integer(let seconds) = lifetime, (1...31_536_000).contains(seconds) else {
                throw Invalid(description: "Telepat settings: token_lifetime is a number of seconds from 1 to 31536000")
            }
            tokenLifetime = seconds
        }
    }

    /// The server bucket holding a context's model: `<context id>.<model>` (neither has a dot).
    public static func bucketName(context: String, model: String) -> String { "\(context).\(model)" }

    static func isName(_ text: String) -> Bool {
        (1...40).contains(text.utf8.count) && text.utf8.allSatisfy { byte in
            (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A) || byte == 0x5F || byte == 0x2D
        }
    }
}
