import ApptimistCrypto
import ApptimistProtocol
import Foundation
import JSONDiff
import Logging
import PostgresTestSupport
@testable import SyncServer
import Testing

/// Events and forums (the seed's "message" routing and "Reserved Files") and file locks shared
/// by the nodes of one store, through real sockets and the independent PyNaCl peer; in the
/// "Apptimist server" suite (one test at a time).
extension ApptimistServerTests {
    /// A forum `author` makes by NEW after its LOGIN. Its key pairs are made here, as a device
    /// makes them: the service only ever sees the public keys; members get the secret box key
    /// from the author by the app's own means.
    static func newForum(_ author: ScriptPeer, name: String = "forum") async throws -> User {
        let forum = User(identity: try ApptimistIdentity.generate(name: name))
        let answer = try await author.send([
            "op": "new", "name": .string(name),
            "event_box_secret": .string(ApptimistHex.encode(forum.identity.box.secretKey)),
            "event_sign_seed": .string(ApptimistHex.encode(forum.identity.signing.seed)),
        ])
        guard answer["created"]?.boolValue == true else { throw TestFailure("NEW of a forum refused: \(answer)") }
        return forum
    }

    /// Writes `forum`'s access-control file `name` listing `users`' keys (32 bytes each); the answer's code.
    static func list(_ peer: ScriptPeer, _ name: String, of forum: User, _ users: [User]) async throws -> Int64? {
        code(try await peer.send(["op": "file", "kind": "write", "name": .string(name), "owner": .string(forum.key), "hex": .string(users.map(\.key).joined())]))
    }

    /// The next message `peer` receives, its data opened with `forum`'s secret key as a member does.
    static func forumMessage(_ peer: ScriptPeer, _ forum: User) async throws -> JSONValue {
        try await peer.send(["op": "recv", "kinds": ["message"], "open_as": .string(ApptimistHex.encode(forum.identity.box.secretKey))])
    }

    /// True when no message reaches `peer` within a second.
    static func receivesNoMessage(_ peer: ScriptPeer) async throws -> Bool {
        try await peer.send(["op": "recv", "kinds": ["message"], "timeout": 1])["timeout"]?.boolValue == true
    }

    static func post(_ peer: ScriptPeer, to forum: User, _ text: String) async throws -> String {
        try #require(try await peer.send(["op": "message", "to": .string(forum.key), "text": .string(text)])["id"]?.stringValue)
    }

    // MARK: Forums

    /// A subscriber's message reaches every other member (subscribers, the author, editors)
    /// with `recipient` = that member, its data as sent (it opens with the forum's secret key),
    /// each copy under its own id; the sender has its echo. A non-member's reaches nobody.
    /// TRUNCATE and LOGIN's replay work on each member's copy.
    @Test(arguments: StoreKind.allCases)
    func aForumMessageReachesEveryMemberWithItselfAsRecipient(store: StoreKind) async throws {
        try await withServer(store: store, configure: Self.configure) { server in
            let storage = try Self.storage(server)
            let alice = try await Self.addUser(server, "alice")
            let bob = try await Self.addUser(server, "bob")
            let carol = try await Self.addUser(server, "carol")
            let eve = try await Self.addUser(server, "eve")
            let dave = try await Self.addUser(server, "dave")
            let author = try await Self.loggedIn(server.port, alice)
            defer { Task { await author.close() } }
            let forum = try await Self.newForum(author)
            #expect(try await storage.file(owner: forum.identity.box.publicKey, name: Array("author".utf8)) == alice.identity.box.publicKey)
            #expect(try await Self.list(author, "subscribers", of: forum, [bob, carol]) == 0)
            #expect(try await Self.list(author, "editors", of: forum, [eve]) == 0)
            let bobPeer = try await Self.loggedIn(server.port, bob)
            let carolPeer = try await Self.loggedIn(server.port, carol)
            let evePeer = try await Self.loggedIn(server.port, eve)
            let davePeer = try await Self.loggedIn(server.port, dave)
            defer { Task { await bobPeer.close(); await carolPeer.close(); await evePeer.close(); await davePeer.close() } }

            let sentID = try await Self.post(bobPeer, to: forum, "hello forum")
            let echo = try await bobPeer.send(["op": "recv", "kinds": ["message"]])
            #expect(echo["id"]?.stringValue == sentID)
            #expect(echo["recipient"]?.stringValue == forum.key)
            #expect(echo["text"]?.stringValue == "hello forum")
            var ids: [String: String] = [bob.key: sentID]
            for (peer, member) in [(carolPeer, carol), (author, alice), (evePeer, eve)] {
                let copy = try await Self.forumMessage(peer, forum)
                #expect(copy["text"]?.stringValue == "hello forum")
                #expect(copy["recipient"]?.stringValue == member.key)
                #expect(copy["to"]?.stringValue == forum.key)
                #expect(copy["from"]?.stringValue == bob.key)
                ids[member.key] = copy["id"]?.stringValue
            }
            // The seed's id hashes the header as delivered: one per member.
            #expect(Set(ids.values).count == 4)
            #expect(try await Self.receivesNoMessage(davePeer))
            #expect(try await Self.receivesNoMessage(bobPeer))

            // A non-member's message: ignored, not even echoed; nothing stored.
            _ = try await Self.post(davePeer, to: forum, "let me in")
            for peer in [davePeer, carolPeer, author, bobPeer] { #expect(try await Self.receivesNoMessage(peer)) }
            #expect(try await storage.messages(owner: dave.identity.box.publicKey, after: 0, limit: 10).isEmpty)
            // The forum's own queue holds only the service's notices of its files, no copy.
            let service = try await storage.serviceIdentity().box.publicKey
            #expect(try await storage.messages(owner: forum.identity.box.publicKey, after: 0, limit: 50).allSatisfy { queued in
                if case .message(_, _, _, let from) = queued.pdu { return from == service }
                return false
            })

            // Each copy is its member's: carol's TRUNCATE takes hers only.
            let carolID = try #require(ids[carol.key])
            _ = try await carolPeer.send(["op": "truncate", "id": .string(carolID)])
            #expect(try await carolPeer.send(["op": "recv", "kinds": ["truncate"]])["id"]?.stringValue == carolID)
            #expect(try await storage.messages(owner: carol.identity.box.publicKey, after: 0, limit: 10).isEmpty)
            #expect(try await storage.messages(owner: alice.identity.box.publicKey, after: 0, limit: 10).map { ApptimistHex.encode($0.id) } == [ids[alice.key]])

            // A later LOGIN replays the member's own copies (after `head`, too).
            _ = try await Self.post(evePeer, to: forum, "second")
            for peer in [author, carolPeer, bobPeer] { #expect(try await Self.forumMessage(peer, forum)["text"]?.stringValue == "second") }
            for (head, expected) in [(nil, ["hello forum", "second"]), (ids[alice.key], ["second"])] as [(String?, [String])] {
                let later = try await Self.loggedIn(server.port, alice, head: head)
                defer { Task { await later.close() } }
                var texts: [String] = []
                while true {
                    let replayed = try await later.send([
                        "op": "recv", "kinds": ["message"], "timeout": 1, "open_as": .string(ApptimistHex.encode(forum.identity.box.secretKey)),
                    ])
                    guard let text = replayed["text"]?.stringValue else { break }
                    #expect(replayed["recipient"]?.stringValue == alice.key)
                    texts.append(text)
                }
                #expect(texts == expected, "head \(head ?? "none")")
            }
            let carolLater = try await Self.loggedIn(server.port, carol)
            defer { Task { await carolLater.close() } }
            #expect(try await Self.forumMessage(carolLater, forum)["text"]?.stringValue == "second")
            #expect(try await Self.receivesNoMessage(carolLater))
        }
    }

    /// With a `moderators` file, a message from someone who is not a moderator (a subscriber,
    /// an editor, the author) goes to the moderators only; a moderator's reaches every member.
    /// Without one (removed), a subscriber's reaches every member again.
    @Test(arguments: StoreKind.allCases)
    func withModeratorsOnlyAModeratorsMessageReachesEveryone(store: StoreKind) async throws {
        try await withServer(store: store, configure: Self.configure) { server in
            let alice = try await Self.addUser(server, "alice")
            let bob = try await Self.addUser(server, "bob")
            let carol = try await Self.addUser(server, "carol")
            let eve = try await Self.addUser(server, "eve")
            let mona = try await Self.addUser(server, "mona")
            let author = try await Self.loggedIn(server.port, alice)
            defer { Task { await author.close() } }
            let forum = try await Self.newForum(author)
            #expect(try await Self.list(author, "subscribers", of: forum, [bob, carol]) == 0)
            #expect(try await Self.list(author, "editors", of: forum, [eve]) == 0)
            #expect(try await Self.list(author, "moderators", of: forum, [mona]) == 0)
            let bobPeer = try await Self.loggedIn(server.port, bob)
            let carolPeer = try await Self.loggedIn(server.port, carol)
            let evePeer = try await Self.loggedIn(server.port, eve)
            let monaPeer = try await Self.loggedIn(server.port, mona)
            defer { Task { await bobPeer.close(); await carolPeer.close(); await evePeer.close(); await monaPeer.close() } }
            let everyone = [(author, alice), (bobPeer, bob), (carolPeer, carol), (evePeer, eve), (monaPeer, mona)]

            // Not moderators: a subscriber, an editor, the author. Each message reaches mona only.
            for (sender, user) in [(bobPeer, bob), (evePeer, eve), (author, alice)] {
                let text = "from \(user.identity.name), for approval"
                _ = try await Self.post(sender, to: forum, text)
                #expect(try await sender.send(["op": "recv", "kinds": ["message"]])["text"]?.stringValue == text)
                let copy = try await Self.forumMessage(monaPeer, forum)
                #expect(copy["text"]?.stringValue == text)
                #expect(copy["recipient"]?.stringValue == mona.key)
                #expect(copy["from"]?.stringValue == user.key)
                for (peer, _) in everyone { #expect(try await Self.receivesNoMessage(peer)) }
            }

            // The moderator's message reaches every member.
            _ = try await Self.post(monaPeer, to: forum, "approved")
            #expect(try await monaPeer.send(["op": "recv", "kinds": ["message"]])["recipient"]?.stringValue == forum.key)
            for (peer, member) in everyone where member.key != mona.key {
                let copy = try await Self.forumMessage(peer, forum)
                #expect(copy["text"]?.stringValue == "approved")
                #expect(copy["recipient"]?.stringValue == member.key)
                #expect(copy["from"]?.stringValue == mona.key)
            }
            for (peer, _) in everyone { #expect(try await Self.receivesNoMessage(peer)) }

            // No moderators any more: a subscriber's message reaches every member (mona, listed
            // nowhere else, is none now).
            #expect(Self.code(try await Self.file(author, "remove", "moderators", owner: forum.key)) == 0)
            _ = try await Self.post(carolPeer, to: forum, "unmoderated")
            _ = try await carolPeer.send(["op": "recv", "kinds": ["message"]])
            for (peer, member) in [(author, alice), (bobPeer, bob), (evePeer, eve)] {
                let copy = try await Self.forumMessage(peer, forum)
                #expect(copy["text"]?.stringValue == "unmoderated")
                #expect(copy["recipient"]?.stringValue == member.key)
            }
            #expect(try await Self.receivesNoMessage(monaPeer))
        }
    }

    /// The files in a forum's directory: its author and editors write, members read, others
    /// nothing; the access-control files are the author's (`author` the service's). DEL by
    /// anyone but the author is ignored; the author's deletes the forum, its files and its
    /// routing.
    @Test(arguments: StoreKind.allCases)
    func forumFilesFollowTheAccessRulesAndDELEndsTheForum(store: StoreKind) async throws {
        try await withServer(store: store, configure: Self.configure) { server in
            let storage = try Self.storage(server)
            let alice = try await Self.addUser(server, "alice")
            let bob = try await Self.addUser(server, "bob")
            let eve = try await Self.addUser(server, "eve")
            let dave = try await Self.addUser(server, "dave")
            let author = try await Self.loggedIn(server.port, alice)
            defer { Task { await author.close() } }
            let forum = try await Self.newForum(author)
            #expect(try await Self.list(author, "subscribers", of: forum, [bob]) == 0)
            #expect(try await Self.list(author, "editors", of: forum, [eve]) == 0)
            let bobPeer = try await Self.loggedIn(server.port, bob)
            let evePeer = try await Self.loggedIn(server.port, eve)
            let davePeer = try await Self.loggedIn(server.port, dave)
            defer { Task { await bobPeer.close(); await evePeer.close(); await davePeer.close() } }

            #expect(Self.code(try await Self.file(author, "write", "agenda", text: "by alice", owner: forum.key)) == 0)
            #expect(Self.code(try await Self.file(evePeer, "write", "agenda", text: "by eve", owner: forum.key)) == 0)
            #expect(Self.code(try await Self.file(evePeer, "write", "subscribers", text: "x", owner: forum.key)) == 13)
            #expect(Self.code(try await Self.file(author, "write", "author", text: "x", owner: forum.key)) == 13)
            let read = try await Self.file(bobPeer, "read", "agenda", owner: forum.key)
            #expect(Self.code(read) == 0)
            #expect(read["text"]?.stringValue == "by eve")
            #expect(Self.code(try await Self.file(bobPeer, "read", "subscribers", owner: forum.key)) == 0)
            for kind in ["write", "lock", "remove"] {
                #expect(Self.code(try await Self.file(bobPeer, kind, "agenda", text: "by bob", owner: forum.key)) == 13, "\(kind)")
            }
            #expect(Self.code(try await Self.file(davePeer, "read", "agenda", owner: forum.key)) == 13)

            // Only the author deletes it.
            for peer in [bobPeer, evePeer, davePeer] {
                #expect(try await peer.send(["op": "del", "key": .string(forum.key), "timeout": 1])["deleted"]?.boolValue == false)
            }
            #expect(try await storage.account(publicKey: forum.identity.box.publicKey) != nil)
            _ = try await Self.post(bobPeer, to: forum, "still there")
            _ = try await bobPeer.send(["op": "recv", "kinds": ["message"]])
            #expect(try await Self.forumMessage(author, forum)["text"]?.stringValue == "still there")
            #expect(try await Self.forumMessage(evePeer, forum)["text"]?.stringValue == "still there")

            #expect(try await author.send(["op": "del", "key": .string(forum.key)])["deleted"]?.boolValue == true)
            #expect(try await storage.account(publicKey: forum.identity.box.publicKey) == nil)
            #expect(try await storage.file(owner: forum.identity.box.publicKey, name: Array("agenda".utf8)) == nil)
            #expect(Self.code(try await Self.file(bobPeer, "read", "agenda", owner: forum.key)) == 13)
            // A message to its key now is one to no account: the sender's echo only.
            _ = try await Self.post(bobPeer, to: forum, "anyone?")
            #expect(try await bobPeer.send(["op": "recv", "kinds": ["message"]])["text"]?.stringValue == "anyone?")
            for peer in [author, evePeer] { #expect(try await Self.receivesNoMessage(peer)) }
            #expect(try await storage.messages(owner: alice.identity.box.publicKey, after: 0, limit: 10).count == 1)
        }
    }

    // MARK: Locks shared by nodes

    /// Two connections of one user, on two nodes of one PostgreSQL database (`.postgres`) or on
    /// the one SQLite node: `body(first, second)` gets the servers they connect to.
    static func withLockNodes(
        _ store: StoreKind, lockLifetime: Duration? = nil, _ body: @Sendable (RunningServer, RunningServer) async throws -> Void
    ) async throws {
        let configure: @Sendable (inout ServerConfiguration) -> Void = { configuration in
            Self.configure(&configuration)
            if let lockLifetime { configuration.apptimist?.lockLifetime = lockLifetime }
        }
        switch store {
        case .sqlite:
            try await withServer(configure: configure) { server in try await body(server, server) }
        case .postgres:
            try await withPostgresDatabase { cluster, database in
                var logger = Logger(label: "test-postgres")
                logger.logLevel = .warning
                let storeA = try await PostgresServerStore.open(cluster.location(database: database), passwordIterations: testPasswordIterations, logger: logger)
                defer { storeA.close() }
                let storeB = try await PostgresServerStore.open(cluster.location(database: database), passwordIterations: testPasswordIterations, logger: logger)
                defer { storeB.close() }
                try await withServer(storage: storeA, configure: configure) { nodeA in
                    try await withServer(storage: storeB, configure: configure) { nodeB in try await body(nodeA, nodeB) }
                }
            }
        }
    }

    /// A LOCK on one node holds the file against the user's connection on the other (LOCK,
    /// WRITE and REMOVE answer 16) until the holder's WRITE, REMOVE or closed connection.
    @Test(arguments: StoreKind.allCases)
    func aLockHoldsAcrossNodesUntilWriteRemoveOrTheConnectionsEnd(store: StoreKind) async throws {
        try await Self.withLockNodes(store) { nodeA, nodeB in
            let alice = try await Self.addUser(nodeA, "alice")
            let onA = try await Self.loggedIn(nodeA.port, alice)
            let onB = try await Self.loggedIn(nodeB.port, alice)
            defer { Task { await onA.close(); await onB.close() } }
            #expect(Self.code(try await Self.file(onA, "write", "doc", text: "v1")) == 0)

            #expect(Self.code(try await Self.file(onA, "lock", "doc")) == 0)
            #expect(Self.code(try await Self.file(onB, "lock", "doc")) == 16)
            #expect(Self.code(try await Self.file(onB, "write", "doc", text: "B's")) == 16)
            #expect(Self.code(try await Self.file(onB, "remove", "doc")) == 16)
            // LOCK again by its holder renews it; READ is never held up.
            #expect(Self.code(try await Self.file(onA, "lock", "doc")) == 0)
            #expect(try await Self.file(onB, "read", "doc")["text"]?.stringValue == "v1")
            // The holder's WRITE releases it.
            #expect(Self.code(try await Self.file(onA, "write", "doc", text: "v2")) == 0)
            let locked = try await Self.file(onB, "lock", "doc")
            #expect(Self.code(locked) == 0)
            #expect(locked["text"]?.stringValue == "v2")
            #expect(Self.code(try await Self.file(onA, "lock", "doc")) == 16)
            // The holder's REMOVE releases it.
            #expect(Self.code(try await Self.file(onB, "remove", "doc")) == 0)
            // A LOCK of a file that does not exist holds it too; the holder's closed connection releases it.
            #expect(Self.code(try await Self.file(onA, "lock", "doc")) == 0)
            #expect(Self.code(try await Self.file(onB, "write", "doc", text: "B's")) == 16)
            await onA.close()
            try await eventually { Self.code(try await Self.file(onB, "lock", "doc")) == 0 }
            #expect(Self.code(try await Self.file(onB, "write", "doc", text: "B's")) == 0)
        }
    }

    /// A lock whose holder neither WRITEs nor closes ends after the lock lifetime (3 s here,
    /// 5 minutes by default): another connection takes it over, and the first one's WRITE is
    /// then refused.
    @Test(arguments: StoreKind.allCases)
    func anExpiredLockIsTakenOverOnAnyNode(store: StoreKind) async throws {
        let lifetime = Duration.seconds(3)
        try await Self.withLockNodes(store, lockLifetime: lifetime) { nodeA, nodeB in
            let alice = try await Self.addUser(nodeA, "alice")
            let onA = try await Self.loggedIn(nodeA.port, alice)
            let onB = try await Self.loggedIn(nodeB.port, alice)
            defer { Task { await onA.close(); await onB.close() } }
            #expect(Self.code(try await Self.file(onA, "lock", "doc")) == 0)
            let taken = ContinuousClock.now
            #expect(Self.code(try await Self.file(onB, "lock", "doc")) == 16)
            #expect(ContinuousClock.now - taken < lifetime, "the check of the live lock came too late to count")
            try await Task.sleep(until: taken + lifetime + .milliseconds(500))
            #expect(Self.code(try await Self.file(onB, "lock", "doc")) == 0)
            #expect(Self.code(try await Self.file(onA, "write", "doc", text: "A's, too late")) == 16)
            #expect(Self.code(try await Self.file(onB, "write", "doc", text: "B's")) == 0)
            #expect(try await Self.file(onA, "read", "doc")["text"]?.stringValue == "B's")
        }
    }
}
