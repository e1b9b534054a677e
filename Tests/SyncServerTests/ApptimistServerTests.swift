import ApptimistCrypto
import ApptimistProtocol
import ChildProcesses
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import JSONDiff
import Logging
import PostgresTestSupport
@testable import SyncServer
import Testing

/// The Apptimist App-Server (issue 18) through a real socket, driven by an independent client
/// (`Tests/Peers/apptimist_peer.py`: PyNaCl, websocket-client, its own frames and headers).
/// One test at a time: each starts Python peers, and a burst of them beside the in-process
/// run's timing-sensitive socket tests stalled those on a loaded 2-core machine.
@Suite("Apptimist server", .serialized, .timeLimit(.minutes(3)))
struct ApptimistServerTests {
    static let service = "notes"

    /// A user the test made (in the store or by NEW) and a peer process speaking for it.
    struct User {
        let identity: ApptimistIdentity
        var key: String { ApptimistHex.encode(identity.box.publicKey) }
    }

    static func configure(_ configuration: inout ServerConfiguration) {
        configuration.apptimist = ApptimistSettings(service: service)
    }

    static func storage(_ server: RunningServer) throws -> any ApptimistStorage {
        try #require(server.store.apptimist)
    }

    static func addUser(_ server: RunningServer, _ name: String) async throws -> User {
        let identity = try ApptimistIdentity.generate(name: name)
        try await storage(server).createAccount(
            ApptimistAccount(publicKey: identity.box.publicKey, authKey: identity.signing.publicKey, name: Array(name.utf8), uid: Array("uid-\(name)".utf8), author: nil),
            invitation: nil)
        return User(identity: identity)
    }

    /// A peer connected as `user` (not yet logged in); `subprotocols` nil offers v2 and v1, [] offers none (a seed client).
    static func connect(_ port: Int, _ user: User, subprotocols: [String]? = nil, options: JSONObject = [:]) async throws -> (ScriptPeer, Int) {
        let peer = try ScriptPeer(script: ScriptPeer.script("apptimist_peer.py"), lifetime: 170)
        var command: JSONObject = [
            "op": "connect", "port": .integer(Int64(port)), "service": .string(service),
            "box_secret": .string(ApptimistHex.encode(user.identity.box.secretKey)),
            "sign_seed": .string(ApptimistHex.encode(user.identity.signing.seed)),
        ]
        if let subprotocols { command["subprotocols"] = .array(subprotocols.map { .string($0) }) }
        command.merge(options) { _, option in option }
        do {
            let answer = try await peer.send(command)
            let version = try #require(answer["version"]?.integerValue)
            return (peer, Int(version))
        } catch {
            await peer.close()
            throw error
        }
    }

    static func loggedIn(
        _ port: Int, _ user: User, subprotocols: [String]? = nil, options: JSONObject = [:], head: String? = nil, max: Int = 0
    ) async throws -> ScriptPeer {
        let (peer, _) = try await connect(port, user, subprotocols: subprotocols, options: options)
        var command: JSONObject = ["op": "login", "max": .integer(Int64(max))]
        if let head { command["head"] = .string(head) }
        do {
            let answer = try await peer.send(command)
            guard answer["logged_in"]?.boolValue == true else { throw TestFailure("login refused: \(answer)") }
            return peer
        } catch {
            await peer.close()
            throw error
        }
    }

    static func file(_ peer: ScriptPeer, _ kind: String, _ name: String, text: String? = nil, owner: String? = nil, badBox: Bool = false) async throws -> JSONValue {
        var command: JSONObject = ["op": "file", "kind": .string(kind), "name": .string(name)]
        if let text { command["text"] = .string(text) }
        if let owner { command["owner"] = .string(owner) }
        if badBox { command["bad_box"] = true }
        return try await peer.send(command)
    }

    static func code(_ answer: JSONValue) -> Int64? { answer["code"]?.integerValue }

    // MARK: Files

    @Test(arguments: [nil, ["apptimist.v1"], []] as [[String]?])
    func aUserWritesReadsLocksAndRemovesFiles(subprotocols: [String]?) async throws {
        try await withServer(configure: Self.configure) { server in
            let alice = try await Self.addUser(server, "alice")
            let (probe, version) = try await Self.connect(server.port, alice, subprotocols: subprotocols)
            await probe.close()
            #expect(version == (subprotocols == nil ? 2 : 1))
            let peer = try await Self.loggedIn(server.port, alice, subprotocols: subprotocols)
            let other = try await Self.loggedIn(server.port, alice, subprotocols: subprotocols)
            defer { Task { await peer.close(); await other.close() } }

            #expect(Self.code(try await Self.file(peer, "read", "notes.txt")) == 2)
            #expect(Self.code(try await Self.file(peer, "write", "notes.txt", text: "hello, world")) == 0)
            let read = try await Self.file(peer, "read", "notes.txt")
            #expect(Self.code(read) == 0)
            #expect(read["text"]?.stringValue == "hello, world")
            #expect(try await Self.storage(server).file(owner: alice.identity.box.publicKey, name: Array("notes.txt".utf8)) == Array("hello, world".utf8))

            // A LOCK holds the file against the user's other connection until the WRITE.
            let locked = try await Self.file(peer, "lock", "notes.txt")
            #expect(Self.code(locked) == 0)
            #expect(locked["text"]?.stringValue == "hello, world")
            #expect(Self.code(try await Self.file(other, "lock", "notes.txt")) == 16)
            #expect(Self.code(try await Self.file(other, "write", "notes.txt", text: "theirs")) == 16)
            #expect(Self.code(try await Self.file(other, "remove", "notes.txt")) == 16)
            #expect(Self.code(try await Self.file(peer, "write", "notes.txt", text: "mine")) == 0)
            #expect(Self.code(try await Self.file(other, "write", "notes.txt", text: "theirs")) == 0)
            #expect(try await Self.file(peer, "read", "notes.txt")["text"]?.stringValue == "theirs")

            // A LOCK of a new file answers it empty; a closed connection's locks go with it.
            #expect(Self.code(try await Self.file(other, "lock", "new.txt")) == 0)
            #expect(Self.code(try await Self.file(peer, "write", "new.txt", text: "x")) == 16)
            await other.close()
            try await eventually { Self.code(try await Self.file(peer, "write", "new.txt", text: "x")) == 0 }

            #expect(Self.code(try await Self.file(peer, "remove", "notes.txt")) == 0)
            #expect(Self.code(try await Self.file(peer, "read", "notes.txt")) == 2)
            #expect(Self.code(try await Self.file(peer, "remove", "notes.txt")) == 2)
        }
    }

    @Test func accessControlFilesAndOtherUsersFilesAreRefused() async throws {
        try await withServer(configure: Self.configure) { server in
            let alice = try await Self.addUser(server, "alice")
            let bob = try await Self.addUser(server, "bob")
            let peer = try await Self.loggedIn(server.port, alice)
            defer { Task { await peer.close() } }
            for name in ["author", "editors", "moderators", "subscribers"] {
                #expect(Self.code(try await Self.file(peer, "write", name, text: "x")) == 13)
                #expect(Self.code(try await Self.file(peer, "remove", name)) == 13)
            }
            for name in ["a/b", "..", "."] {
                #expect(Self.code(try await Self.file(peer, "write", name, text: "x")) == 22)
            }
            #expect(Self.code(try await Self.file(peer, "write", "theirs", text: "x", owner: bob.key)) == 13)
            #expect(Self.code(try await Self.file(peer, "read", "theirs", owner: bob.key)) == 13)
            let refused = try await Self.file(peer, "read", "theirs", owner: bob.key)
            #expect(refused["text"]?.stringValue?.isEmpty == false)
            #expect(try await Self.storage(server).file(owner: bob.identity.box.publicKey, name: Array("theirs".utf8)) == nil)
        }
    }

    // MARK: File notices

    /// The notices a peer receives until `timeout` seconds pass with none (each one described).
    static func notices(_ peer: ScriptPeer, timeout: Int = 2) async throws -> [JSONValue] {
        var notices: [JSONValue] = []
        while true {
            let answer = try await peer.send(["op": "recv", "kinds": ["notice"], "timeout": .integer(Int64(timeout))])
            if answer["timeout"]?.boolValue == true { return notices }
            #expect(answer["type"]?.stringValue == "notice", "\(answer)")
            notices.append(answer)
        }
    }

    static func sha512Hex(_ text: String) throws -> String { ApptimistHex.encode(try SHA512.digest(Array(text.utf8))) }

    /// Every WRITE and REMOVE of a user's file, by any connection, queues a file notice for the
    /// user (Docs/apptimist-protocol.md, "File notices"): the user's other connection gets exactly
    /// one per change, from the service's key, sealed to the user, naming the file, its size and
    /// hash; a refused change queues none.
    @Test(arguments: StoreKind.allCases)
    func aWriteOrRemoveByOneConnectionIsNoticedOnTheUsersOthers(store: StoreKind) async throws {
        try await withServer(store: store, configure: Self.configure) { server in
            let alice = try await Self.addUser(server, "alice")
            let bob = try await Self.addUser(server, "bob")
            let serviceKey = ApptimistHex.encode(try await Self.storage(server).serviceIdentity().box.publicKey)
            let writer = try await Self.loggedIn(server.port, alice)
            let watcher = try await Self.loggedIn(server.port, alice)
            let stranger = try await Self.loggedIn(server.port, bob)
            defer { Task { await writer.close(); await watcher.close(); await stranger.close() } }

            #expect(Self.code(try await Self.file(writer, "write", "notes.txt", text: "hello")) == 0)
            let written = try await Self.notices(watcher)
            #expect(written.count == 1, "\(written)")
            let notice = try #require(written.first)
            #expect(notice["name"]?.stringValue == "notes.txt")
            #expect(notice["file"]?.stringValue == ApptimistHex.encode(Array("notes.txt".utf8)))
            #expect(notice["op"]?.stringValue == "write")
            #expect(notice["size"]?.integerValue == 5)
            #expect(notice["sha512"]?.stringValue == (try Self.sha512Hex("hello")))
            #expect(notice["from"]?.stringValue == serviceKey)
            #expect(notice["to"]?.stringValue == alice.key)
            #expect(notice["recipient"]?.stringValue == alice.key)
            #expect(notice["version"]?.integerValue == 2)
            // The writing connection hears of it too (after its answer); another user does not.
            #expect(try await Self.notices(writer).map { $0["name"]?.stringValue } == ["notes.txt"])
            #expect(try await Self.notices(stranger, timeout: 1).isEmpty)

            // An overwrite, then a removal: one notice each.
            #expect(Self.code(try await Self.file(writer, "write", "notes.txt", text: "hello again")) == 0)
            let overwritten = try await Self.notices(watcher)
            #expect(overwritten.map { $0["sha512"]?.stringValue } == [try Self.sha512Hex("hello again")])
            #expect(overwritten.first?["size"]?.integerValue == 11)
            #expect(Self.code(try await Self.file(writer, "remove", "notes.txt")) == 0)
            let removed = try await Self.notices(watcher)
            #expect(removed.map { $0["op"]?.stringValue } == ["remove"])
            #expect(removed.first?["name"]?.stringValue == "notes.txt")
            #expect(removed.first?["sha512"] == nil)

            // Refused changes queue nothing: a REMOVE of no file, a WRITE against another's lock.
            #expect(Self.code(try await Self.file(writer, "remove", "notes.txt")) == 2)
            #expect(Self.code(try await Self.file(watcher, "lock", "held")) == 0)
            #expect(Self.code(try await Self.file(writer, "write", "held", text: "x")) == 16)
            #expect(try await Self.notices(watcher, timeout: 1).isEmpty)
        }
    }

    /// At most one notice per file is queued: five saves of one file leave one notice (the last
    /// contents'), so a device logging in with a zero head gets a listing of the user's files
    /// (one stored without a notice gets one at LOGIN); a head that was a notice since replaced
    /// replays the queue from its start.
    @Test(arguments: StoreKind.allCases)
    func noticesCoalesceSoAFreshLoginListsTheFiles(store: StoreKind) async throws {
        try await withServer(store: store, configure: Self.configure) { server in
            let alice = try await Self.addUser(server, "alice")
            let bob = try await Self.addUser(server, "bob")
            let writer = try await Self.loggedIn(server.port, alice)
            defer { Task { await writer.close() } }
            var firstNoticeID: String?
            for index in 1 ... 5 {
                #expect(Self.code(try await Self.file(writer, "write", "same.txt", text: "version \(index)")) == 0)
                let notices = try await Self.notices(writer, timeout: 1)
                if firstNoticeID == nil { firstNoticeID = notices.first?["id"]?.stringValue }
            }
            #expect(Self.code(try await Self.file(writer, "write", "other.txt", text: "other")) == 0)
            #expect(Self.code(try await Self.file(writer, "write", "gone.txt", text: "soon gone")) == 0)
            #expect(Self.code(try await Self.file(writer, "remove", "gone.txt")) == 0)
            // A message to the user stays in the queue beside the notices.
            let friend = try await Self.loggedIn(server.port, bob)
            defer { Task { await friend.close() } }
            _ = try await friend.send(["op": "message", "to": .string(alice.key), "text": "hi alice"])
            _ = try await friend.send(["op": "recv", "kinds": ["message"]])

            let queued = try await Self.storage(server).messages(owner: alice.identity.box.publicKey, after: 0, limit: 100)
            #expect(queued.count == 4, "3 notices and a message: \(queued.count)")
            // A file stored without a notice (as before notices existed) gets one at the next LOGIN.
            try await Self.storage(server).writeFile(owner: alice.identity.box.publicKey, name: Array("old.txt".utf8), contents: Array("old".utf8), notice: nil)

            func fresh(head: String?) async throws -> (notices: [JSONValue], messages: [String]) {
                let peer = try await Self.loggedIn(server.port, alice, head: head)
                defer { Task { await peer.close() } }
                let notices = try await Self.notices(peer)
                var messages: [String] = []
                while let text = try await peer.send(["op": "recv", "kinds": ["message"], "timeout": 1])["text"]?.stringValue { messages.append(text) }
                return (notices, messages)
            }
            let listing = try await fresh(head: nil)
            #expect(listing.notices.map { $0["name"]?.stringValue ?? "" }.sorted() == ["gone.txt", "old.txt", "other.txt", "same.txt"])
            #expect(listing.notices.first { $0["name"]?.stringValue == "old.txt" }?["sha512"]?.stringValue == (try Self.sha512Hex("old")))
            let same = listing.notices.first { $0["name"]?.stringValue == "same.txt" }
            #expect(same?["sha512"]?.stringValue == (try Self.sha512Hex("version 5")))
            #expect(listing.notices.first { $0["name"]?.stringValue == "gone.txt" }?["op"]?.stringValue == "remove")
            #expect(listing.messages == ["hi alice"])
            // The first notice of same.txt was replaced: a head naming it replays everything.
            let replaced = try await fresh(head: try #require(firstNoticeID))
            #expect(replaced.notices.count == 4)
            #expect(replaced.messages == ["hi alice"])
        }
    }

    /// Notices are version 2 only (version 1's fixed data nonce would repeat under the one
    /// service-user key pair): a version 1 connection gets none, and its own writes are noticed
    /// on the user's version 2 connections.
    @Test func aVersion1ConnectionGetsNoNotices() async throws {
        try await withServer(configure: Self.configure) { server in
            let alice = try await Self.addUser(server, "alice")
            let seed = try await Self.loggedIn(server.port, alice, subprotocols: [])
            let current = try await Self.loggedIn(server.port, alice)
            defer { Task { await seed.close(); await current.close() } }
            #expect(Self.code(try await Self.file(seed, "write", "from-v1", text: "v1")) == 0)
            #expect(Self.code(try await Self.file(current, "write", "from-v2", text: "v2")) == 0)
            #expect(try await Self.notices(current).map { $0["name"]?.stringValue ?? "" }.sorted() == ["from-v1", "from-v2"])
            #expect(try await Self.notices(seed, timeout: 1).isEmpty)
            #expect(try await seed.send(["op": "recv", "kinds": ["message"], "timeout": 1])["timeout"]?.boolValue == true)
            let later = try await Self.loggedIn(server.port, alice, subprotocols: ["apptimist.v1"])
            defer { Task { await later.close() } }
            #expect(try await Self.notices(later, timeout: 1).isEmpty)
        }
    }

    // MARK: Accounts

    @Test(arguments: StoreKind.allCases)
    func newNeedsAnInvitationThatWorksOnce(store: StoreKind) async throws {
        try await withServer(store: store, configure: Self.configure) { server in
            let storage = try Self.storage(server)
            let token = try await storage.createInvitation()
            let carol = User(identity: try ApptimistIdentity.generate(name: "carol"))
            let (peer, _) = try await Self.connect(server.port, carol)
            #expect(try await peer.send(["op": "new", "name": "carol", "uid": "c1", "token": .string(token)])["created"]?.boolValue == true)
            #expect(try await peer.send(["op": "login"])["logged_in"]?.boolValue == true)
            #expect(Self.code(try await Self.file(peer, "write", "hello", text: "carol's")) == 0)
            await peer.close()

            // The same token again, and a made-up one: the connection is closed, no account made.
            for attempt in [token, "00112233445566778899aabbccddeeff"] {
                let dave = User(identity: try ApptimistIdentity.generate(name: "dave"))
                let (other, _) = try await Self.connect(server.port, dave)
                let answer = try await other.send(["op": "new", "name": "dave", "token": .string(attempt)])
                #expect(answer["closed"]?.integerValue == 1008)
                await other.close()
                #expect(try await storage.account(publicKey: dave.identity.box.publicKey) == nil)
            }
        }
    }

    @Test func aLoginWithABadSignatureOrAnUnknownKeyIsClosed() async throws {
        try await withServer(configure: Self.configure) { server in
            let alice = try await Self.addUser(server, "alice")
            let (peer, _) = try await Self.connect(server.port, alice)
            #expect(try await peer.send(["op": "login", "bad_signature": true])["closed"]?.integerValue == 1008)
            await peer.close()
            let stranger = User(identity: try ApptimistIdentity.generate(name: "stranger"))
            let (other, _) = try await Self.connect(server.port, stranger)
            #expect(try await other.send(["op": "login"])["closed"]?.integerValue == 1008)
            await other.close()
            // Before LOGIN a file PDU is ignored, as the seed says.
            let (early, _) = try await Self.connect(server.port, alice)
            defer { Task { await early.close() } }
            #expect(try await early.send(["op": "file", "kind": "read", "name": "x", "no_wait": true])["sent"]?.boolValue == true)
            #expect(try await early.send(["op": "recv", "timeout": 1])["timeout"]?.boolValue == true)
            #expect(try await early.send(["op": "login"])["logged_in"]?.boolValue == true)
        }
    }

    @Test func aConnectionThatDoesNotLogInIsClosedAtTheInitTimeout() async throws {
        try await withServer(configure: { configuration in
            Self.configure(&configuration)
            configuration.initTimeout = .seconds(1)
        }) { server in
            let alice = try await Self.addUser(server, "alice")
            let (idle, _) = try await Self.connect(server.port, alice)
            defer { Task { await idle.close() } }
            #expect(try await idle.send(["op": "recv", "timeout": 20])["closed"] != nil)
            // One that logs in in time stays past it.
            let peer = try await initialisedWithinAShortDeadline { try await Self.loggedIn(server.port, alice) }
            defer { Task { await peer.close() } }
            try await Task.sleep(for: .seconds(2))
            #expect(Self.code(try await Self.file(peer, "write", "still", text: "here")) == 0)
        }
    }

    // MARK: Messages

    @Test(arguments: [nil, ["apptimist.v1"]] as [[String]?])
    func messagesReachTheRecipientAndEchoToTheSender(subprotocols: [String]?) async throws {
        try await withServer(configure: Self.configure) { server in
            let alice = try await Self.addUser(server, "alice")
            let bob = try await Self.addUser(server, "bob")
            let sender = try await Self.loggedIn(server.port, alice, subprotocols: subprotocols)
            let recipient = try await Self.loggedIn(server.port, bob, subprotocols: subprotocols)
            defer { Task { await sender.close(); await recipient.close() } }
            let sent = try await sender.send(["op": "message", "to": .string(bob.key), "text": "hi bob"])
            let id = try #require(sent["id"]?.stringValue)
            let received = try await recipient.send(["op": "recv", "kinds": ["message"]])
            #expect(received["text"]?.stringValue == "hi bob")
            #expect(received["id"]?.stringValue == id)
            #expect(received["from"]?.stringValue == alice.key)
            let echo = try await sender.send(["op": "recv", "kinds": ["message"]])
            #expect(echo["id"]?.stringValue == id)
            #expect(echo["text"]?.stringValue == "hi bob")

            // TRUNCATE removes it from bob's queue only, and is echoed to bob.
            _ = try await recipient.send(["op": "truncate", "id": .string(id)])
            #expect(try await recipient.send(["op": "recv", "kinds": ["truncate"]])["id"]?.stringValue == id)
            let storage = try Self.storage(server)
            #expect(try await storage.messages(owner: bob.identity.box.publicKey, after: 0, limit: 10).isEmpty)
            #expect(try await storage.messages(owner: alice.identity.box.publicKey, after: 0, limit: 10).count == 1)

            // A MESSAGE claiming another sender is not stored.
            _ = try await sender.send(["op": "message", "to": .string(bob.key), "from": .string(bob.key), "text": "forged"])
            #expect(try await recipient.send(["op": "recv", "kinds": ["message"], "timeout": 1])["timeout"]?.boolValue == true)
            #expect(try await storage.messages(owner: bob.identity.box.publicKey, after: 0, limit: 10).isEmpty)
        }
    }

    /// Issue 36: a version 1 device's message reaches its recipient's version 2 connection (the
    /// data part carries the seed's fixed nonce there) under the id that connection computes,
    /// which LOGIN's head and TRUNCATE take as well as the version 1 id, each device hearing the
    /// TRUNCATE echo under its own; a version 2 message to a user whose devices all speak version
    /// 1 is not queued, and its sender gets a bounce naming it instead of an echo.
    @Test(arguments: StoreKind.allCases)
    func messagesCrossFromVersion1ToVersion2AndBounceTheOtherWay(store: StoreKind) async throws {
        try await withServer(store: store, configure: Self.configure) { server in
            let alice = try await Self.addUser(server, "alice")
            let bob = try await Self.addUser(server, "bob")
            let carol = try await Self.addUser(server, "carol")
            // A seed client offers no subprotocol: version 1.
            let aliceV1 = try await Self.loggedIn(server.port, alice, subprotocols: [])
            let bobV2 = try await Self.loggedIn(server.port, bob)
            let carolV1 = try await Self.loggedIn(server.port, carol, subprotocols: [])
            defer { Task { await aliceV1.close(); await bobV2.close(); await carolV1.close() } }
            let storage = try Self.storage(server)

            let sent = try await aliceV1.send(["op": "message", "to": .string(bob.key), "text": "from a seed client"])
            let v1ID = try #require(sent["id"]?.stringValue)
            let received = try await bobV2.send(["op": "recv", "kinds": ["message"]])
            #expect(received["text"]?.stringValue == "from a seed client")
            #expect(received["from"]?.stringValue == alice.key)
            let v2ID = try #require(received["id"]?.stringValue)
            #expect(v2ID != v1ID)
            #expect(try await aliceV1.send(["op": "recv", "kinds": ["message"]])["id"]?.stringValue == v1ID)

            // A version 2 device whose head is the version 2 id has it; a version 1 device of
            // bob's gets it under the version 1 id.
            let bobAgain = try await Self.loggedIn(server.port, bob, head: v2ID)
            defer { Task { await bobAgain.close() } }
            #expect(try await bobAgain.send(["op": "recv", "kinds": ["message"], "timeout": 1])["timeout"]?.boolValue == true)
            let bobV1 = try await Self.loggedIn(server.port, bob, subprotocols: [])
            defer { Task { await bobV1.close() } }
            let onV1 = try await bobV1.send(["op": "recv", "kinds": ["message"]])
            #expect(onV1["id"]?.stringValue == v1ID && onV1["text"]?.stringValue == "from a seed client")

            // TRUNCATE by the version 2 id: gone from bob's queue, each device told in its own id.
            _ = try await bobV2.send(["op": "truncate", "id": .string(v2ID)])
            #expect(try await bobV2.send(["op": "recv", "kinds": ["truncate"]])["id"]?.stringValue == v2ID)
            #expect(try await bobV1.send(["op": "recv", "kinds": ["truncate"]])["id"]?.stringValue == v1ID)
            #expect(try await storage.messages(owner: bob.identity.box.publicKey, after: 0, limit: 10).isEmpty)

            // The other way: carol has logged in with version 1 only. Bob (who has a version 1
            // device too, so his own messages still reach him) gets a bounce, not an echo.
            let toCarol = try await bobV2.send(["op": "message", "to": .string(carol.key), "text": "from a version 2 device"])
            let bounce = try await bobV2.send(["op": "recv", "kinds": ["notice"]])
            #expect(bounce["undelivered"]?.stringValue == toCarol["id"]?.stringValue)
            #expect(bounce["to"]?.stringValue == carol.key)
            #expect(bounce["reason"]?.stringValue?.contains("version 1") == true)
            #expect(try await bobV2.send(["op": "recv", "kinds": ["message"], "timeout": 1])["timeout"]?.boolValue == true)
            #expect(try await carolV1.send(["op": "recv", "kinds": ["message"], "timeout": 1])["timeout"]?.boolValue == true)
            #expect(try await storage.messages(owner: carol.identity.box.publicKey, after: 0, limit: 10).isEmpty)
        }
    }

    /// A version 1 client written from the seed's header lines alone (MESSAGE without `time`,
    /// searches without `maxUsers`) is read, and answered in that layout from then on, and from
    /// its devices' next LOGIN; each kind of connection names a message by the id it computes.
    @Test(arguments: StoreKind.allCases)
    func aClientThatFollowsTheSeedsHeaderLinesIsReadAndAnsweredInThem(store: StoreKind) async throws {
        try await withServer(store: store, configure: Self.configure) { server in
            let alice = try await Self.addUser(server, "alice")
            let bob = try await Self.addUser(server, "bob")
            let headerLines: JSONObject = ["header_lines": true]
            let alicePeer = try await Self.loggedIn(server.port, alice, subprotocols: [], options: headerLines)
            let bobV1 = try await Self.loggedIn(server.port, bob, subprotocols: [])
            let bobV2 = try await Self.loggedIn(server.port, bob)
            defer { Task { await alicePeer.close(); await bobV1.close(); await bobV2.close() } }

            // A search with no `maxUsers` is answered (it was closed 1002 before).
            let found = try await alicePeer.send(["op": "search", "kind": "search_by_name", "value": "bo"])
            #expect(found["users"]?.arrayValue?.compactMap { $0["key"]?.stringValue } == [bob.key])

            // A MESSAGE with no `time`: the service stamps its own; alice's echo comes in her
            // layout, under the id she computed; bob's devices get theirs.
            let before = UInt64(Date().timeIntervalSince1970)
            let sent = try await alicePeer.send(["op": "message", "to": .string(bob.key), "text": "as the header line says"])
            let aliceID = try #require(sent["id"]?.stringValue)
            let echo = try await alicePeer.send(["op": "recv", "kinds": ["message"]])
            #expect(echo["id"]?.stringValue == aliceID && echo["header_length"]?.integerValue == 98)
            let onV1 = try await bobV1.send(["op": "recv", "kinds": ["message"]])
            #expect(onV1["text"]?.stringValue == "as the header line says" && onV1["header_length"]?.integerValue == 106)
            #expect(try #require(onV1["time"]?.integerValue) >= Int64(before))
            let onV2 = try await bobV2.send(["op": "recv", "kinds": ["message"]])
            #expect(onV2["text"]?.stringValue == "as the header line says")
            #expect(Set([aliceID, onV1["id"]?.stringValue, onV2["id"]?.stringValue].compactMap { $0 }).count == 3)

            // Bob's answer reaches her in her layout; her TRUNCATE by her id removes it, and
            // the echo names it by that id.
            _ = try await bobV1.send(["op": "message", "to": .string(alice.key), "text": "an answer"])
            let answer = try await alicePeer.send(["op": "recv", "kinds": ["message"]])
            #expect(answer["text"]?.stringValue == "an answer" && answer["header_length"]?.integerValue == 98)
            let answerID = try #require(answer["id"]?.stringValue)
            _ = try await alicePeer.send(["op": "truncate", "id": .string(answerID)])
            #expect(try await alicePeer.send(["op": "recv", "kinds": ["truncate"]])["id"]?.stringValue == answerID)
            let left = try await Self.storage(server).messages(owner: alice.identity.box.publicKey, after: 0, limit: 10)
            #expect(left.count == 1)

            // Another device of hers that has not spoken yet: LOGIN's replay comes in header lines
            // (her account remembers them), and a head by her id finds the message.
            let aliceAgain = try await Self.loggedIn(server.port, alice, subprotocols: [], options: headerLines)
            defer { Task { await aliceAgain.close() } }
            let replayed = try await aliceAgain.send(["op": "recv", "kinds": ["message"]])
            #expect(replayed["id"]?.stringValue == aliceID && replayed["header_length"]?.integerValue == 98)
            let atHead = try await Self.loggedIn(server.port, alice, subprotocols: [], options: headerLines, head: aliceID)
            defer { Task { await atHead.close() } }
            #expect(try await atHead.send(["op": "recv", "kinds": ["message"], "timeout": 1])["timeout"]?.boolValue == true)
        }
    }

    @Test(arguments: StoreKind.allCases)
    func loginReplaysAfterHeadWithinMaxAndPauseHoldsDelivery(store: StoreKind) async throws {
        try await withServer(store: store, configure: Self.configure) { server in
            let alice = try await Self.addUser(server, "alice")
            let bob = try await Self.addUser(server, "bob")
            let sender = try await Self.loggedIn(server.port, alice)
            defer { Task { await sender.close() } }
            var ids: [String] = []
            for index in 1 ... 4 {
                ids.append(try #require(try await sender.send(["op": "message", "to": .string(bob.key), "text": .string("m\(index)")])["id"]?.stringValue))
            }
            for _ in ids { _ = try await sender.send(["op": "recv", "kinds": ["message"]]) }

            func replay(head: String?, max: Int) async throws -> [String] {
                let peer = try await Self.loggedIn(server.port, bob, head: head, max: max)
                defer { Task { await peer.close() } }
                var texts: [String] = []
                while let text = try await peer.send(["op": "recv", "kinds": ["message"], "timeout": 1])["text"]?.stringValue { texts.append(text) }
                return texts
            }
            #expect(try await replay(head: nil, max: 0) == ["m1", "m2", "m3", "m4"])
            #expect(try await replay(head: ids[1], max: 0) == ["m3", "m4"])
            #expect(try await replay(head: ids[1], max: 3) == ["m3", "m4"])
            // The head is not among the last 2: the service sends those 2.
            #expect(try await replay(head: ids[0], max: 2) == ["m3", "m4"])
            #expect(try await replay(head: ids[3], max: 0) == [])

            let bobPeer = try await Self.loggedIn(server.port, bob, head: ids[3])
            defer { Task { await bobPeer.close() } }
            _ = try await bobPeer.send(["op": "pause"])
            // PAUSE is handled before the next PDU is read: a search answered means it took effect.
            _ = try await bobPeer.send(["op": "search", "kind": "search_by_key", "key": .string(bob.key)])
            _ = try await sender.send(["op": "message", "to": .string(bob.key), "text": "while paused"])
            _ = try await sender.send(["op": "recv", "kinds": ["message"]])
            #expect(try await bobPeer.send(["op": "recv", "kinds": ["message"], "timeout": 1])["timeout"]?.boolValue == true)
            _ = try await bobPeer.send(["op": "resume"])
            #expect(try await bobPeer.send(["op": "recv", "kinds": ["message"]])["text"]?.stringValue == "while paused")
        }
    }

    // MARK: Searches and vouches

    @Test(arguments: StoreKind.allCases)
    func searchesAnswerWithUserPDUsAndVouchesAreListed(store: StoreKind) async throws {
        try await withServer(store: store, configure: Self.configure) { server in
            let alice = try await Self.addUser(server, "alice")
            let alan = try await Self.addUser(server, "alan")
            let bob = try await Self.addUser(server, "bob")
            let peer = try await Self.loggedIn(server.port, alice)
            defer { Task { await peer.close() } }
            let byName = try await peer.send(["op": "search", "kind": "search_by_name", "value": "al"])["users"]?.arrayValue ?? []
            #expect(byName.map { $0["name"]?.stringValue } == ["alan", "alice"])
            #expect(byName.map { $0["count"]?.integerValue } == [1, 0])
            let limited = try await peer.send(["op": "search", "kind": "search_by_name", "value": "al", "max_users": 1])["users"]?.arrayValue ?? []
            #expect(limited.map { $0["name"]?.stringValue } == ["alan"])
            let byUID = try await peer.send(["op": "search", "kind": "search_by_uid", "value": "uid-bob"])["users"]?.arrayValue ?? []
            #expect(byUID.map { $0["key"]?.stringValue } == [bob.key])
            let byKey = try await peer.send(["op": "search", "kind": "search_by_key", "key": .string(alan.key)])["users"]?.arrayValue ?? []
            #expect(byKey.map { $0["name"]?.stringValue } == ["alan"])
            let none = try await peer.send(["op": "search", "kind": "search_by_name", "value": "zed"])["users"]?.arrayValue ?? []
            #expect(none.count == 1)
            #expect(none.first?["name"]?.stringValue == "")
            #expect(none.first?["key"]?.stringValue == String(repeating: "0", count: 64))

            _ = try await peer.send(["op": "vouch", "subject": .string(bob.key), "bad_signature": true])
            #expect(try await peer.send(["op": "vouchers", "subject": .string(bob.key)])["vouchers"]?.arrayValue == [])
            _ = try await peer.send(["op": "vouch", "subject": .string(bob.key)])
            #expect(try await peer.send(["op": "vouchers", "subject": .string(bob.key)])["vouchers"]?.arrayValue == [.string(alice.key)])
            _ = try await peer.send(["op": "vouch", "subject": .string(bob.key), "revoke": true])
            #expect(try await peer.send(["op": "vouchers", "subject": .string(bob.key)])["vouchers"]?.arrayValue == [])
        }
    }

    // MARK: Bad input

    @Test(arguments: ["bad_box", "truncated_frame", "length_past_frame", "unknown_type", "replay", "wrong_key", "text"])
    func badInputClosesTheConnectionAndChangesNothing(kind: String) async throws {
        try await withServer(configure: Self.configure) { server in
            let alice = try await Self.addUser(server, "alice")
            let bystander = try await Self.loggedIn(server.port, alice)
            defer { Task { await bystander.close() } }
            #expect(Self.code(try await Self.file(bystander, "write", "kept", text: "before")) == 0)
            let peer = try await Self.loggedIn(server.port, alice)
            #expect(Self.code(try await Self.file(peer, "write", "kept", text: "after")) == 0)
            _ = try await peer.send(["op": "raw", "kind": .string(kind)])
            // Only the close is waited for (the file notices of the writes are kept by the peer).
            let answer = try await peer.send(["op": "recv", "kinds": ["message"], "timeout": 20])
            #expect(answer["closed"] != nil, "\(kind): \(answer)")
            await peer.close()
            #expect(try await Self.storage(server).file(owner: alice.identity.box.publicKey, name: Array("kept".utf8)) == Array("after".utf8))
            // The server goes on serving the other connection.
            #expect(try await Self.file(bystander, "read", "kept")["text"]?.stringValue == "after")
        }
    }

    @Test func aWriteWhoseDataDoesNotOpenIsRefusedAndStoresNothing() async throws {
        let statistics = ServerStatistics()
        try await withServer(configure: {
            Self.configure(&$0)
            $0.statistics = statistics
        }) { server in
            let alice = try await Self.addUser(server, "alice")
            let peer = try await Self.loggedIn(server.port, alice)
            defer { Task { await peer.close() } }
            #expect(Self.code(try await Self.file(peer, "write", "kept", text: "good")) == 0)
            #expect(Self.code(try await Self.file(peer, "write", "kept", text: "evil", badBox: true)) == 22)
            #expect(try await Self.file(peer, "read", "kept")["text"]?.stringValue == "good")
            // Counted in the metrics as Apptimist changes (issue 38); the read is not a change.
            let metrics = statistics.prometheusText()
            #expect(metrics.contains(#"bucketfs_changes_accepted_total{protocol="apptimist"} 1"#), "\(metrics)")
            #expect(metrics.contains(#"bucketfs_changes_refused_total{protocol="apptimist",code="22"} 1"#))
        }
    }

    // MARK: PostgreSQL nodes

    /// Two nodes on one PostgreSQL database: an account, its files and its messages are the
    /// same through either; a message queued on one reaches a connection of the other.
    @Test func twoNodesOnOnePostgresDatabaseShareAccountsFilesAndQueues() async throws {
        try await withPostgresDatabase { cluster, database in
            var logger = Logger(label: "test-postgres")
            logger.logLevel = .warning
            let storeA = try await PostgresServerStore.open(cluster.location(database: database), passwordIterations: testPasswordIterations, logger: logger)
            defer { storeA.close() }
            let storeB = try await PostgresServerStore.open(cluster.location(database: database), passwordIterations: testPasswordIterations, logger: logger)
            defer { storeB.close() }
            try await withServer(storage: storeA, configure: Self.configure) { nodeA in
                try await withServer(storage: storeB, configure: Self.configure) { nodeB in
                    let alice = try await Self.addUser(nodeA, "alice")
                    let bob = try await Self.addUser(nodeB, "bob")
                    let onA = try await Self.loggedIn(nodeA.port, alice)
                    let onB = try await Self.loggedIn(nodeB.port, bob)
                    defer { Task { await onA.close(); await onB.close() } }
                    #expect(Self.code(try await Self.file(onA, "write", "shared", text: "via A")) == 0)
                    let aliceOnB = try await Self.loggedIn(nodeB.port, alice)
                    defer { Task { await aliceOnB.close() } }
                    #expect(try await Self.file(aliceOnB, "read", "shared")["text"]?.stringValue == "via A")
                    let id = try #require(try await onA.send(["op": "message", "to": .string(bob.key), "text": "across"])["id"]?.stringValue)
                    let received = try await onB.send(["op": "recv", "kinds": ["message"]])
                    #expect(received["id"]?.stringValue == id)
                    #expect(received["text"]?.stringValue == "across")
                    // Both nodes serve the same service key.
                    let keyA = try await nodeA.store.apptimist?.serviceIdentity().box.publicKey
                    let keyB = try await nodeB.store.apptimist?.serviceIdentity().box.publicKey
                    #expect(keyA != nil && keyA == keyB)
                }
            }
        }
    }

    // MARK: Sequences

    /// Version 1's u16 sequence: the service's side (even numbers, its key sorting second) runs
    /// out after 32,767 PDUs (answers to READs it refuses without the store, to keep the load
    /// on a shared machine low). It sends every one it sealed, then closes; it never wraps to reuse
    /// a header nonce.
    @Test func aConnectionWhoseSequenceRunsOutIsClosedNotWrapped() async throws {
        try await withServer(configure: Self.configure) { server in
            let alice = try await Self.addUser(server, "alice")
            let (peer, version) = try await Self.connect(server.port, alice, subprotocols: ["apptimist.v1"], options: ["device_first": true])
            defer { Task { await peer.close() } }
            #expect(version == 1)
            #expect(try await peer.send(["op": "login"])["logged_in"]?.boolValue == true)
            let answer = try await peer.send(["op": "flood", "count": 40_000], timeout: .seconds(150))
            // The client's odd numbers 3...65535 after LOGIN; the service's 4...65534 after its echo.
            #expect(answer["sent"]?.integerValue == 32_767)
            #expect(answer["replies"]?.integerValue == 32_766)
            #expect(answer["last_seq"]?.integerValue == 65_534)
            #expect(answer["closed"]?.integerValue == 1000, "\(answer)")
            #expect(answer["reason"]?.stringValue?.contains("sequence is used up") == true)
        }
    }

    // MARK: Restart

    @Test func aRestartedServerKeepsFilesQueuesAndKeys() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let (alice, bob, id, session) = try await withServer(directory: directory, configure: Self.configure) { server in
            let alice = try await Self.addUser(server, "alice")
            let bob = try await Self.addUser(server, "bob")
            let peer = try await Self.loggedIn(server.port, alice)
            #expect(Self.code(try await Self.file(peer, "write", "kept", text: "durable")) == 0)
            let id = try #require(try await peer.send(["op": "message", "to": .string(bob.key), "text": "queued"])["id"]?.stringValue)
            _ = try await peer.send(["op": "recv", "kinds": ["message"]])
            // The session is still open when the server goes.
            return (alice, bob, id, peer)
        }
        #expect(try await session.send(["op": "recv", "kinds": ["message"], "timeout": 20])["closed"] != nil)
        await session.close()
        try await withServer(directory: directory, configure: Self.configure) { server in
            // The peer fetches the service key again and checks it; the same key is served.
            let peer = try await Self.loggedIn(server.port, alice)
            let recipient = try await Self.loggedIn(server.port, bob)
            defer { Task { await peer.close(); await recipient.close() } }
            #expect(try await Self.file(peer, "read", "kept")["text"]?.stringValue == "durable")
            let received = try await recipient.send(["op": "recv", "kinds": ["message"]])
            #expect(received["id"]?.stringValue == id)
            #expect(received["text"]?.stringValue == "queued")
        }
    }
}

/// Polls `condition` until it holds (bounded by the hang guard).
func eventually(_ condition: () async throws -> Bool) async throws {
    let deadline = ContinuousClock.now + hangGuard
    while ContinuousClock.now < deadline {
        if try await condition() { return }
        try await Task.sleep(for: .milliseconds(100))
    }
    throw TestFailure("condition not met within \(hangGuard)")
}

/// The same through a real `bucketfs serve --apptimist` and the operator's commands.
@Suite("Apptimist serve binary", .serialized, .timeLimit(.minutes(3)))
struct ApptimistServeBinaryTests {
    /// Runs `bucketfs ARGUMENTS`; its exit status and standard output (standard error appended
    /// to the failure message when it fails).
    static func bucketfs(_ arguments: [String]) async throws -> (status: Int32, output: String) {
        try await offThePool { try runBucketfs(arguments) }
    }

    private static func runBucketfs(_ arguments: [String]) throws -> (status: Int32, output: String) {
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: ServeBinary.binary)
        process.arguments = arguments
        let output = Pipe()
        let errors = Pipe()
        process.standardOutput = output
        process.standardError = errors
        try process.run()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        let errorText = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        return (process.terminationStatus, text + (process.terminationStatus == 0 ? "" : errorText))
    }

    @Test func keygenUserAddInviteAndServeWorkTogether() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let data = directory.path + "/data"
        let aliceFile = directory.path + "/alice.identity"
        let keygen = try await Self.bucketfs(["apptimist", "keygen", aliceFile])
        #expect(keygen.status == 0, "\(keygen.output)")
        let alice = ApptimistServerTests.User(identity: try ApptimistIdentity(file: aliceFile))
        #expect(keygen.output.contains("public key \(alice.key)"))
        #expect(try FileManager.default.attributesOfItem(atPath: aliceFile)[.posixPermissions] as? Int == 0o600)
        #expect(try await Self.bucketfs(["apptimist", "keygen", aliceFile]).status != 0, "an identity file is never replaced")
        #expect(try await Self.bucketfs(["apptimist", "user", "add", "alice", "--data", data, "--identity", aliceFile]).status == 0)
        #expect(try await Self.bucketfs(["apptimist", "user", "add", "alice", "--data", data, "--identity", aliceFile]).status != 0, "the key has an account")
        let token = try await Self.bucketfs(["apptimist", "invite", "--data", data]).output.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(token.count == 32)
        let keyDocument = try await Self.bucketfs(["apptimist", "service-key", "--data", data, "--service", "notes"]).output
        let serviceKey = try ApptimistServiceKey(json: Data(keyDocument.utf8))

        let server = try await ServeBinary(data: data, extraArguments: ["--apptimist", "notes"])
        defer { server.stop() }
        let carol = ApptimistServerTests.User(identity: try ApptimistIdentity.generate(name: "carol"))
        let (newcomer, _) = try await ApptimistServerTests.connect(server.port, carol)
        defer { Task { await newcomer.close() } }
        #expect(try await newcomer.send(["op": "new", "name": "carol", "token": .string(token)])["created"]?.boolValue == true)
        #expect(try await newcomer.send(["op": "login"])["logged_in"]?.boolValue == true)

        let (probe, version) = try await ApptimistServerTests.connect(server.port, alice)
        #expect(version == 2)
        await probe.close()
        let peer = try await ApptimistServerTests.loggedIn(server.port, alice)
        defer { Task { await peer.close() } }
        #expect(ApptimistServerTests.code(try await ApptimistServerTests.file(peer, "write", "todo", text: "buy milk")) == 0)
        #expect(try await ApptimistServerTests.file(peer, "read", "todo")["text"]?.stringValue == "buy milk")
        _ = try await peer.send(["op": "message", "to": .string(carol.key), "text": "welcome"])
        #expect(try await newcomer.send(["op": "recv", "kinds": ["message"]])["text"]?.stringValue == "welcome")
        // GET /SERVICE serves the key service-key printed (the peer checked its signature).
        #expect(serviceKey.service == "notes")
        #expect(try await Self.servedKey(port: server.port) == ApptimistHex.encode(serviceKey.publicKey))
    }

    static func servedKey(port: Int) async throws -> String? {
        let (data, _) = try await URLSession.shared.data(from: try #require(URL(string: "http://127.0.0.1:\(port)/notes")))
        return ApptimistHex.encode(try ApptimistServiceKey(json: data).publicKey)
    }

    @Test func serveRefusesABadServiceName() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        for name in ["sock", "a/b", ""] {
            #expect(try await Self.bucketfs(["serve", "--data", directory.path, "--apptimist", name, "--port", "0"]).status != 0)
        }
    }
}
