import ApptimistCrypto
import ApptimistProtocol

/// An Apptimist account: a user (made by `bucketfs apptimist user add` or NEW with an invitation)
/// or an event/forum a logged-in user made with NEW (`author` is then its creator).
struct ApptimistAccount: Sendable, Hashable {
    var publicKey: [UInt8]
    var authKey: [UInt8]
    var name: [UInt8]
    var uid: [UInt8]
    var author: [UInt8]?
    /// The versions this account has logged in with (`recordLogin`): whether a version 2
    /// message can reach any device of it (`ApptimistQueuedMessage.rendition`).
    var loginVersions: Set<ApptimistVersion> = []
    /// The header layout its version 1 devices last spoke (`recordHeaderLayout`): a version 1
    /// connection of it is answered in it until the device speaks for itself.
    var headerLayout: ApptimistHeaderLayout = .fieldLists
}

/// A queued message as the service keeps it: the sender's header and sealed data, unopened.
struct ApptimistQueuedMessage: Sendable, Hashable {
    /// Its place in its owner's queue (ascending; a session delivers after a cursor).
    var seq: Int64
    var id: [UInt8]
    var version: ApptimistVersion
    var pdu: ApptimistPDU
    var data: ApptimistSealedData
    /// The id connections of the other version know it by (`rendition`), when it reaches them.
    var crossID: [UInt8]? = nil
    /// The id version 1 connections that speak the seed's header lines know it by (`rendition`,
    /// `ApptimistHeaderLayout.headerLines`), when it reaches version 1.
    var literalID: [UInt8]? = nil
}

extension ApptimistQueuedMessage {
    /// A message to queue, with the seed's id: sha512 of the header (rendered under `version`,
    /// version byte first, as every receiver opens it) and the data part as framed.
    init(version: ApptimistVersion, pdu: ApptimistPDU, data: ApptimistSealedData) throws {
        let header = try ApptimistHeader(version: version, pdu: pdu).render()
        self.init(seq: 0, id: try SHA512.digest(header + data.wireBytes), version: version, pdu: pdu, data: data)
    }

    /// The message as a connection of `version` whose headers are laid out as `layout` gets
    /// it: the data part framed for that version and the id that connection computes for it
    /// (the seed's: sha512 of the header it opens and the data part); nil when it cannot reach
    /// such a connection. Version 1 data was sealed with the seed's fixed nonce (`dataNonce`),
    /// which a version 2 frame carries in front of it; version 2 data sealed with a random
    /// nonce cannot be opened by a version 1 device, which opens every data part with the fixed
    /// one (only a message without data crosses). The service never opens or seals the data
    /// again: it has no key to.
    func rendition(
        for version: ApptimistVersion, layout: ApptimistHeaderLayout = .fieldLists, dataNonce: [UInt8]
    ) throws -> (data: ApptimistSealedData, id: [UInt8])? {
        let header = ApptimistHeader(version: version, pdu: pdu, layout: layout)
        guard version != self.version || header.layout != .fieldLists else { return (data, id) }
        let framed: ApptimistSealedData
        switch version {
        case self.version:
            framed = data
        case .v2:
            framed = data.isEmpty ? .none : ApptimistSealedData(nonce: dataNonce, sealed: data.sealed)
        case .v1:
            guard data.isEmpty || data.nonce == dataNonce else { return nil }
            framed = ApptimistSealedData(nonce: nil, sealed: data.sealed)
        }
        return (framed, try SHA512.digest(try header.render() + framed.wireBytes))
    }

    /// With `crossID` and `literalID` set from `rendition` (what the store keeps, for TRUNCATE
    /// and LOGIN's `head` from every kind of connection).
    func withRenditionIDs(dataNonce: [UInt8]) throws -> ApptimistQueuedMessage {
        var message = self
        message.crossID = try rendition(for: version == .v1 ? .v2 : .v1, dataNonce: dataNonce)?.id
        message.literalID = try rendition(for: .v1, layout: .headerLines, dataNonce: dataNonce)?.id
        return message
    }

    /// A message as a store keeps it: the header's bytes parsed again under its version.
    init(
        stored seq: Int64, id: [UInt8], crossID: [UInt8]?, literalID: [UInt8]?, version versionNumber: Int, header: [UInt8],
        nonce: [UInt8]?, data: [UInt8]
    ) throws {
        guard let version = ApptimistVersion(rawValue: UInt8(clamping: versionNumber)) else {
            throw ApptimistStoreError.corrupt("message version \(versionNumber)")
        }
        let parsed: ApptimistHeader
        do {
            parsed = try ApptimistHeader.parse(header, version: version)
        } catch {
            throw ApptimistStoreError.corrupt("message header: \(error)")
        }
        self.init(
            seq: seq, id: id, version: version, pdu: parsed.pdu, data: ApptimistSealedData(nonce: nonce, sealed: data), crossID: crossID,
            literalID: literalID)
    }

    /// The ids a queued message is known by, newest first: what LOGIN's `head` is looked for in.
    struct Names: Sendable {
        var seq: Int64
        var id: [UInt8]
        var crossID: [UInt8]?
        var literalID: [UInt8]?
    }

    /// Where LOGIN's replay starts, from the newest messages first: the window the seed's `max`
    /// lets the service search (all when 0). After `head` when it is there; else from the
    /// oldest of a limited window, or from the start. A message is found by any of its ids (a
    /// device of the other version's head, or of a version 1 device speaking header lines).
    static func replayStart(window: [Names], head: [UInt8], max: UInt16) -> Int64 {
        if head.contains(where: { $0 != 0 }), let found = window.first(where: { $0.id == head || $0.crossID == head || $0.literalID == head }) {
            return found.seq
        }
        guard max != 0, let oldest = window.last else { return 0 }
        return oldest.seq - 1
    }
}

/// What the three searches look for.
enum ApptimistSearch: Sendable, Hashable {
    /// Accounts whose name starts with these bytes (the seed leaves the syntax open).
    case namePrefix([UInt8])
    case uid([UInt8])
    case publicKey([UInt8])
}

/// Why the Apptimist store refused.
enum ApptimistStoreError: Error, Sendable, Hashable, CustomStringConvertible {
    case accountExists
    case invitationRefused
    case corrupt(String)
    case unsupportedStore

    var description: String {
        switch self {
        case .accountExists: return "an account with that public key exists"
        case .invitationRefused: return "the invitation token is unknown or used"
        case .corrupt(let what): return "corrupt Apptimist record: \(what)"
        case .unsupportedStore: return "this store has no Apptimist tables"
        }
    }
}

/// The seam between the Apptimist service and its durable state: `ApptimistSQLiteStore` and
/// `ApptimistPostgresStore`; the service never knows which it talks to.
protocol ApptimistStorage: Sendable {
    /// How often a logged-in connection looks for messages other nodes queued; nil when no
    /// other node writes to this store.
    var pollInterval: Duration? { get }
    /// The service's own key pairs, made on first use and kept.
    func serviceIdentity() async throws -> ApptimistIdentity
    /// A new single-use invitation token for NEW.
    func createInvitation() async throws -> String
    /// Creates `account`; with an invitation, consumes it in the same transaction (a refused
    /// token creates nothing). Throws `accountExists`, `invitationRefused`.
    func createAccount(_ account: ApptimistAccount, invitation: String?) async throws
    func account(publicKey: [UInt8]) async throws -> ApptimistAccount?
    /// Accounts matching `search`, in name order, at most `limit` (nil: all).
    func accounts(matching search: ApptimistSearch, limit: Int?) async throws -> [ApptimistAccount]
    /// Deletes an account with its files and queue.
    func deleteAccount(publicKey: [UInt8]) async throws
    func file(owner: [UInt8], name: [UInt8]) async throws -> [UInt8]?
    /// Stores the file whole and, in the same transaction, queues `notice` (a file notice,
    /// Docs/apptimist-protocol.md) for `owner` in place of its earlier notice of `name`: at most
    /// one notice per owner and file is queued.
    func writeFile(owner: [UInt8], name: [UInt8], contents: [UInt8], notice: ApptimistQueuedMessage?) async throws
    /// False when there was no such file (then nothing is queued); else as `writeFile` for `notice`.
    func removeFile(owner: [UInt8], name: [UInt8], notice: ApptimistQueuedMessage?) async throws -> Bool
    /// Queues a notice, made by `notice` from a file's name and contents, for each of `owner`'s
    /// files that has none queued (stored before notices existed, or its notice truncated), in
    /// one transaction with the reading: a notice a change queues meanwhile is never replaced.
    func queueMissingNotices(owner: [UInt8], notice: @escaping @Sendable (_ name: [UInt8], _ contents: [UInt8]) throws -> ApptimistQueuedMessage) async throws
    /// Appends each copy to its owner's queue (one transaction); owners without an account are skipped.
    func queueMessages(_ copies: [(owner: [UInt8], message: ApptimistQueuedMessage)]) async throws
    /// The owner's messages after `seq`, oldest first, at most `limit`.
    func messages(owner: [UInt8], after seq: Int64, limit: Int) async throws -> [ApptimistQueuedMessage]
    /// Where LOGIN's replay starts (deliver after the returned seq): after `head` when it is
    /// among the last `max` messages (all when `max` is 0); else from the oldest of those.
    func replayStart(owner: [UInt8], head: [UInt8], max: UInt16) async throws -> Int64
    /// Removes a message, known by any of its ids (`ApptimistQueuedMessage.rendition`), from its
    /// owner's queue; nil when it was not there.
    func truncate(owner: [UInt8], id: [UInt8]) async throws -> ApptimistQueuedMessage?
    /// Notes that `publicKey` logged in with `version` (`ApptimistAccount.loginVersions`).
    func recordLogin(publicKey: [UInt8], version: ApptimistVersion) async throws
    /// Notes the header layout `publicKey`'s version 1 devices speak (`ApptimistAccount.headerLayout`).
    func recordHeaderLayout(publicKey: [UInt8], layout: ApptimistHeaderLayout) async throws
    /// Records (or with nil, revokes) `voucher`'s signature of `subject`.
    func setVouch(subject: [UInt8], voucher: [UInt8], signature: [UInt8]?) async throws
    func vouchers(subject: [UInt8]) async throws -> [[UInt8]]

    // File locks (LOCK until WRITE or REMOVE, the connection's end, or the lifetime): the
    // service's nodes share them (one node: in memory; PostgreSQL: a table).

    /// Takes (or renews) the lock on `owner`'s `name` for `holder`, expiring `lifetime` from now;
    /// false when another holder's lock has not expired (an expired one is taken over).
    func takeLock(owner: [UInt8], name: [UInt8], holder: ApptimistLockHolder, lifetime: Duration) async throws -> Bool
    /// Whether a holder other than `holder` has a lock on the file that has not expired.
    func isLocked(owner: [UInt8], name: [UInt8], byOtherThan holder: ApptimistLockHolder) async throws -> Bool
    /// Ends `holder`'s lock on the file, if it has it.
    func releaseLock(owner: [UInt8], name: [UInt8], holder: ApptimistLockHolder) async throws
    /// Ends every lock of `holder` (its connection ended).
    func releaseLocks(holder: ApptimistLockHolder) async throws
}

extension ApptimistStorage {
    /// Appends `message` to each owner's queue (one transaction): the same id in every queue.
    func queueMessage(_ message: ApptimistQueuedMessage, owners: [[UInt8]]) async throws {
        try await queueMessages(owners.map { (owner: $0, message: message) })
    }

    /// The 32-byte keys an access-control file (`editors`, `moderators`, `subscribers`) of
    /// `owner` lists; none when there is no such file (a trailing partial key is ignored).
    func keys(listedIn name: String, of owner: [UInt8]) async throws -> [[UInt8]] {
        let bytes = try await file(owner: owner, name: Array(name.utf8)) ?? []
        return stride(from: 0, to: bytes.count - CryptoBox.keyLength + 1, by: CryptoBox.keyLength).map {
            Array(bytes[$0 ..< $0 + CryptoBox.keyLength])
        }
    }
}

/// Who holds a file lock: a connection (`connection`, numbered by its node) of a node (`node`,
/// random per start of the service), so no two connections of any nodes on one store share one.
struct ApptimistLockHolder: Sendable, Hashable {
    var node: [UInt8]
    var connection: UInt64

    /// The holder as one byte string (the node, then the connection as 8 big-endian bytes).
    var bytes: [UInt8] { node + withUnsafeBytes(of: connection.bigEndian) { Array($0) } }
}

extension ServerStorage {
    /// The Apptimist tables of this store.
    var apptimist: (any ApptimistStorage)? {
        if let store = self as? ServerStore { return ApptimistSQLiteStore(store) }
        if let store = self as? PostgresServerStore { return ApptimistPostgresStore(store) }
        return nil
    }
}

/// What the operator's command line does with a store's Apptimist accounts (`bucketfs apptimist`).
public struct ApptimistAdministration: Sendable {
    let storage: any ApptimistStorage

    /// A new single-use invitation token for NEW.
    public func invite() async throws -> String { try await storage.createInvitation() }

    /// Creates a user account for these public keys. Throws when the key has an account.
    public func addUser(publicKey: [UInt8], authKey: [UInt8], name: String, uid: String) async throws {
        try await storage.createAccount(
            ApptimistAccount(publicKey: publicKey, authKey: authKey, name: Array(name.utf8), uid: Array(uid.utf8), author: nil), invitation: nil)
    }

    /// The service key document clients fetch from `GET /SERVICE` (the keys are made on first use).
    public func serviceKey(service: String) async throws -> ApptimistServiceKey {
        try ApptimistServiceKey(service: service, identity: try await storage.serviceIdentity())
    }
}

extension ServerBackend {
    /// The store's Apptimist accounts.
    public func apptimist() throws -> ApptimistAdministration {
        guard let storage = storage.apptimist else { throw ApptimistStoreError.unsupportedStore }
        return ApptimistAdministration(storage: storage)
    }
}

extension ApptimistVersion {
    /// This version's bit in a stored set of versions (`apptimist_accounts.login_versions`).
    var bit: Int { 1 << (Int(rawValue) - 1) }

    static func set(bits: Int) -> Set<ApptimistVersion> { Set(allCases.filter { bits & $0.bit != 0 }) }
}
