import SyncEngine
import SyncProtocol
import SyncStore

/// The protocol life of one bucket channel (spec "Syncing Bucket Objects"), as pure logic:
/// each transition returns the actions the connection carries out, so it is tested without
/// sockets (the shape of swift-nio's HTTPServerPipelineHandler).
struct BucketMachine: Sendable {
    enum Phase: Equatable, Sendable {
        /// No connection.
        case offline
        /// `init` sent, waiting for `auth`.
        case authorizing
        /// Loading the index page by page (first sync, or after `cv:?`).
        case indexing
        /// `cv:` sent, waiting for the changes since.
        case catchingUp
        /// In sync; local changes flow as they are saved.
        case ready
        /// The server refused the token; nothing is sent until a new authorization.
        case unauthorized(AuthFailure)
    }

    enum Action: Equatable, Sendable {
        /// Write this message on the bucket's channel.
        case send(ChannelClientMessage)
        /// Start a fresh index in the store (entities unseen at the end are removed).
        case beginIndex
        /// Apply an index page in the store; `isLast` completes the index.
        case applyIndexPage(IndexPage, isLast: Bool)
        /// Apply remote changes / acknowledgements / errors in the store.
        case applyChanges([Change])
        /// After a catch-up: settle 409s and send every change still owed.
        case finishCatchUp
        /// Send every change still owed (after the index loaded).
        case sendOwed
        /// Send `cv:<stored cv>` (read from the store when the action runs).
        case sendCatchUp
        /// Tell the user the channel is not authorized.
        case reportAuthFailure(AuthFailure)
    }

    let channel: Int
    let bucket: String
    let pageLimit: Int
    private(set) var phase: Phase = .offline
    /// `e` requests in flight on this connection (`key.version`), so each is asked once.
    private(set) var requestedEntities: Set<String> = []
    /// First-sync progress: entities stored / entities the index announced so far.
    private(set) var entitiesDone = 0
    private(set) var entitiesKnown = 0
    /// Bytes of index pages and entity replies received during the current (re-)index.
    private(set) var bytesReceived = 0
    /// A catch-up was asked for while another was running: run one more afterwards.
    private var catchUpAgain = false

    init(channel: Int, bucket: String, pageLimit: Int) {
        self.channel = channel
        self.bucket = bucket
        self.pageLimit = pageLimit
    }

    var isReady: Bool { phase == .ready }

    /// The connection is open: authorize (optionally with the first command embedded).
    mutating func connected(initRequest: InitRequest) -> [Action] {
        phase = .authorizing
        requestedEntities.removeAll()
        catchUpAgain = false
        return [.send(.initialize(initRequest))]
    }

    /// The first command after authorization: `cv:<cv>` with a stored index, else the index.
    func firstCommand(cv: String?) -> ChannelClientMessage {
        if let cv { return .changeVersion(cv) }
        return .index(IndexRequest(includeData: true, mark: nil, offset: nil, limit: pageLimit))
    }

    /// `auth:<user>`. `commandSent` is true when `init` carried the first command as `cmd`.
    mutating func authorized(cv: String?, commandSent: Bool) -> [Action] {
        var actions: [Action] = []
        if let cv {
            phase = .catchingUp
            if !commandSent { actions.append(.send(.changeVersion(cv))) }
        } else {
            phase = .indexing
            entitiesDone = 0
            entitiesKnown = 0
            bytesReceived = 0
            actions.append(.beginIndex)
            if !commandSent { actions.append(.send(firstCommand(cv: nil))) }
        }
        return actions
    }

    /// `auth:{...}`: a clear failure, nothing more is sent on this channel.
    mutating func authorizationFailed(code: Int, message: String) -> [Action] {
        let failure = AuthFailure(code: code, message: message)
        phase = .unauthorized(failure)
        return [.reportAuthFailure(failure)]
    }

    /// `cv:?`: the server forgot our cv; load the index again (local pending changes stay).
    mutating func changeVersionUnknown() -> [Action] {
        phase = .indexing
        entitiesDone = 0
        entitiesKnown = 0
        bytesReceived = 0
        return [.beginIndex, .send(firstCommand(cv: nil))]
    }

    /// Counts a frame's bytes towards first-sync progress (only while indexing).
    mutating func received(bytes: Int) {
        if phase == .indexing { bytesReceived += bytes }
    }

    /// An `i` page: store it, then ask for the next page, or finish the first sync.
    mutating func indexPage(_ page: IndexPage) -> [Action] {
        guard phase == .indexing else { return [] }
        entitiesKnown += page.index.count
        entitiesDone += page.index.filter { $0.data != nil }.count
        if let mark = page.mark {
            // Ask for the next page first, so the server reads and sends it while this one is
            // stored (messages are handled in order: it is applied only after this page).
            return [
                .send(.index(IndexRequest(includeData: true, mark: mark, offset: nil, limit: pageLimit))),
                .applyIndexPage(page, isLast: false),
            ]
        }
        phase = .ready
        return [.applyIndexPage(page, isLast: true), .sendOwed]
    }

    /// A `c` message. In catch-up it is the answer to `cv:`; then what is owed is sent.
    mutating func changes(_ changes: [Change]) -> [Action] {
        switch phase {
        case .offline, .authorizing, .unauthorized:
            return []
        case .indexing, .ready:
            return [.applyChanges(changes)]
        case .catchingUp:
            if catchUpAgain {
                catchUpAgain = false
                return [.applyChanges(changes), .sendCatchUp]
            }
            phase = .ready
            return [.applyChanges(changes), .finishCatchUp]
        }
    }

    /// A change error asked for the changes since the stored cv (405, 409, 412).
    mutating func catchUp() -> [Action] {
        switch phase {
        case .ready:
            phase = .catchingUp
            return [.sendCatchUp]
        case .catchingUp:
            catchUpAgain = true
            return []
        default:
            return []
        }
    }

    /// Entities to fetch with `e`, each asked once per connection.
    mutating func fetch(_ reloads: [ReloadRequest]) -> [Action] {
        guard phase != .offline, phase != .authorizing else { return [] }
        var actions: [Action] = []
        for reload in reloads {
            guard let version = reload.version else { continue }
            let id = "\(reload.key).\(version)"
            if requestedEntities.insert(id).inserted {
                actions.append(.send(.entity(key: reload.key, version: version)))
            }
        }
        return actions
    }

    /// An `e` reply arrived.
    mutating func entityReceived(key: String, version: Int) {
        if requestedEntities.remove("\(key).\(version)") != nil && entitiesDone < entitiesKnown {
            entitiesDone += 1
        }
    }

    /// The connection closed.
    mutating func disconnected() {
        if case .unauthorized = phase { return }
        phase = .offline
        requestedEntities.removeAll()
    }

    /// A new token is available: an unauthorized channel may try again.
    mutating func clearAuthorizationFailure() {
        if case .unauthorized = phase { phase = .offline }
    }

    var isUnauthorized: Bool {
        if case .unauthorized = phase { return true }
        return false
    }
}
