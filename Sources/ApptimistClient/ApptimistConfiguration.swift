import ApptimistCrypto
import ApptimistProtocol

/// How an Apptimist engine reaches its service and who it is there.
public struct ApptimistConfiguration: Sendable {
    /// `ws://HOST[:PORT]/SERVICE` (the query, the device's ephemeral key, is added per connection).
    public var serverURL: String
    /// The user's key pairs (the identity file).
    public var identity: ApptimistIdentity
    /// What the device knows of the service (its key document, signature checked): its box key
    /// and its self-signature, whose first bytes start every header nonce.
    public var service: ApptimistServiceKey
    /// The lowest version accepted: version 2 once a server was seen speaking it (so an attacker
    /// on the plain path cannot strip the offer and force version 1).
    public var minimumVersion: ApptimistVersion = .v1
    /// LOGIN's `max`: how many queued messages the service searches back for `head` (0: all).
    public var maxHistory: UInt16 = 0
    /// How long a request waits for its answer before the connection is taken for dead.
    public var answerTimeout: Duration = .seconds(10)
    public var connectTimeout: Duration = .seconds(10)
    /// Reconnect delay after the first failure; doubles per failure up to `maximumBackoff`.
    public var initialBackoff: Duration = .milliseconds(500)
    public var maximumBackoff: Duration = .seconds(60)
    /// How long a connection must last to reset the delay.
    public var stableConnection: Duration = .seconds(10)
    /// Largest binary message accepted.
    public var maxMessageBytes: Int = 64 * 1024 * 1024
    /// Largest file a WRITE sends: bucketfs's service closes a connection whose message is over
    /// 4 MiB (as the Simperium and Telepat front ends do), header and file together; the header
    /// takes well under 64 KiB. A bigger file is kept locally and refused (413), not sent again
    /// at every reconnect while every later save waits behind it.
    public var maxWriteBytes: Int = 4 * 1024 * 1024 - 64 * 1024
    /// Tests only: the highest header sequence number the mount sends on one connection before
    /// it closes it and opens another (default: the version's maximum, 65,535 in version 1).
    public var sequenceLimit: UInt64?
    /// Tests only: the versions offered (default: every version, most preferred first).
    public var offeredSubprotocols: [String] = ApptimistVersion.offered

    public init(serverURL: String, identity: ApptimistIdentity, service: ApptimistServiceKey) {
        self.serverURL = serverURL
        self.identity = identity
        self.service = service
    }
}

/// The three buckets of an Apptimist mount and how each shows.
public enum ApptimistBuckets {
    /// The user's server-resident files, by name.
    public static let files = "files"
    /// Messages received (and sent, once echoed), by hex message id: read-only.
    public static let messages = "messages"
    /// Files written here are sent as messages to the recipients they name.
    public static let outbox = "outbox"

    public static let all = [files, messages, outbox]

    /// The service's access-control files: read, never written by a device through the mount.
    public static let reservedFiles = ["author", "editors", "moderators", "subscribers"]
}

/// Why the engine could not start or a connection ended.
public enum ApptimistEngineError: Error, Hashable, Sendable, CustomStringConvertible {
    case configuration(String)
    case connection(String)
    /// The server answered with a lower version than this mount accepts (a stripped offer?).
    case downgrade(offered: String, accepted: ApptimistVersion, minimum: ApptimistVersion)

    public var description: String {
        switch self {
        case .configuration(let why): return why
        case .connection(let why): return why
        case .downgrade(let offered, let accepted, let minimum):
            return "the server answered version \(accepted.rawValue) to an offer of \(offered); this mount has seen version \(minimum.rawValue) from it and refuses less (an attacker may have stripped the offer)"
        }
    }
}
