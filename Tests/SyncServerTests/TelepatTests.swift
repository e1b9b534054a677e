import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import JSONDiff
import Logging
import SyncProtocol
@testable import SyncServer
import TelepatProtocol
import Testing

/// The Telepat front end against a real, independent Telepat client (python-socketio 4.6 with
/// python-engineio 3.14, and requests), checked against what a Simperium client of the
/// application's owner sees of the same bucket, both ways (issue 15).
@Suite(.timeLimit(.minutes(3)))
struct TelepatTests {
    static let appID = "tp-app"
    static let apiKey = "tp-key"
    static let secret = Array("telepat-test-secret".utf8)
    static let settings = TelepatSettings(
        applications: [.init(id: appID, apiKey: apiKey, contexts: [.init(id: "c1", name: "Tasks", models: ["task"])])],
        jwtSecret: secret
    )

    static func configure(_ configuration: inout ServerConfiguration) {
        configure(&configuration, pingInterval: .seconds(5))
    }

    /// - Parameter pingInterval: also the ping timeout. The peer pings this often and gives up
    ///   after one unanswered ping, so a short one makes a loaded machine's slow answer a lost
    ///   socket (the whole suite at once on 2 cores took a 1 s one past it).
    static func configure(_ configuration: inout ServerConfiguration, pingInterval: Duration) {
        configuration.telepat = settings
        configuration.pingInterval = pingInterval
        configuration.maxDocumentSize = 4096
        // The Simperium client only listens at first: its broadcasts must not wait for a command.
        configuration.broadcastHoldAfterAuth = .zero
    }

    static var headers: [String: String] {
        [
            "Content-Type": "application/json", "X-BLGREQ-APPID": appID,
            "X-BLGREQ-SIGN": settings.applications[appID]!.sign, "X-BLGREQ-UDID": "TP_EMPTY_UDID",
        ]
    }

    /// A peer with a registered device, a logged-in user (`ann` unless named; made with
    /// `makeUser`) and, when `connected`, a bound socket. Returns the peer and the headers of user routes.
    private func telepatClient(_ server: RunningServer, user: String = "ann", connected: Bool = true) async throws -> (TelepatPeer, [String: String]) {
        let peer = try TelepatPeer(port: server.port)
        let (status, registered) = try await peer.http("POST", "/device/register", headers: Self.headers, body: .object(["info": .object(["os": "linux"])]))
        #expect(status == 200)
        let device = try #require(registered["content"]?["identifier"]?.stringValue)
        let (loginStatus, login) = try await peer.http(
            "POST", "/user/login-password", headers: Self.headers, body: .object(["username": .string(user), "password": .string("secret-\(user)")]))
        #expect(loginStatus == 200)
        let token = try #require(login["content"]?["token"]?.stringValue)
        var headers = Self.headers
        headers["X-BLGREQ-UDID"] = device
        headers["Authorization"] = "Bearer \(token)"
        if connected { try await peer.connect(device: device, application: Self.appID) }
        return (peer, headers)
    }

    private func objectOf(_ entry: JSONValue?) throws -> JSONObject { try #require(entry?["object"]?.objectValue) }

    /// The application's owner (made as `bucketfs serve --telepat` makes it) and a Simperium token of it.
    private func owner(_ server: RunningServer) async throws -> (id: Int64, token: String) {
        let application = try #require(Self.settings.applications[Self.appID])
        let id = try await TelepatOwners.ensure(application, store: server.store)
        return (id, try await server.store.issueToken(username: application.owner).accessToken)
    }

    @Test(arguments: StoreKind.allCases)
    func telepatAndSimperiumClientsSeeTheSameObjectsBothWays(store: StoreKind) async throws {
        try await withServer(store: store, configure: Self.configure) { server in
            _ = try await makeUser(server, "ann")
            let simperium = try await server.socket()
            defer { Task { await simperium.close() } }
            _ = try await simperium.authorize(token: try await owner(server).token, bucket: "c1.task")

            let (peer, headers) = try await telepatClient(server)
            defer { Task { await peer.close() } }
            let channel: JSONValue = .object(["context": "c1", "model": "task"])
            let (subscribed, initial) = try await peer.http("POST", "/object/subscribe", headers: headers, body: .object(["channel": channel]))
            #expect(subscribed == 200)
            #expect(initial["content"] == .array([]))

            // Telepat create: a `new` notification, and a Simperium create of the same object.
            let (created, _) = try await peer.http("POST", "/object/create", headers: headers, body: .object([
                "context": "c1", "model": "task", "content": .object(["title": "one", "n": .integer(1)]),
            ]))
            #expect(created == 202)
            let new = try #require(try await peer.nextMessage())
            let object = try objectOf(new["data"]?["new"]?.arrayValue?.first)
            let id = try #require(object["id"]?.stringValue)
            #expect(object["title"] == "one" && object["type"] == "task" && object["context_id"] == "c1")
            let simperiumCreate = try appliedChange(try await simperium.receiveMessage())
            #expect(simperiumCreate.id == id && simperiumCreate.sourceVersion == nil && simperiumCreate.endVersion == 1)
            #expect(try JSONDiffing.apply(try #require(simperiumCreate.diff), to: [:]) == object)

            // Telepat update: `updated` replace patches, and a Simperium change with a new version.
            let (updated, _) = try await peer.http("POST", "/object/update", headers: headers, body: .object([
                "context": "c1", "model": "task", "id": .string(id), "patches": .array([
                    .object(["op": "replace", "path": .string("task/\(id)/title"), "value": "two"]),
                    .object(["op": "increment", "path": .string("task/\(id)/n"), "value": .integer(2)]),
                ]),
            ]))
            #expect(updated == 202)
            let patches = try #require(try await peer.nextMessage()?["data"]?["updated"]?.arrayValue).compactMap { $0["patch"] }
            #expect(patches.contains(.object(["op": "replace", "path": .string("task/\(id)/title"), "value": "two"])))
            #expect(patches.contains(.object(["op": "replace", "path": .string("task/\(id)/n"), "value": .integer(3)])))
            let simperiumUpdate = try appliedChange(try await simperium.receiveMessage())
            #expect(simperiumUpdate.id == id && simperiumUpdate.sourceVersion == 1 && simperiumUpdate.endVersion == 2)
            let afterUpdate = try JSONDiffing.apply(try #require(simperiumUpdate.diff), to: object)
            #expect(afterUpdate["title"] == "two" && afterUpdate["n"] == .integer(3))

            // Simperium change: a Telepat `updated` replace patch.
            let diff = JSONDiffing.encode(JSONDiffing.diff(from: afterUpdate, to: afterUpdate.merging(["title": "three"]) { $1 })).compactRendered()
            _ = try appliedChange(try ServerMessage.parse(try await simperium.request(changeFrame(key: id, diff: diff, sv: 2, ccid: newCCID()))))
            let fromSimperium = try #require(try await peer.nextMessage()?["data"]?["updated"]?.arrayValue)
            #expect(fromSimperium.compactMap { $0["patch"] } == [.object(["op": "replace", "path": .string("task/\(id)/title"), "value": "three"])])

            // Simperium create: a Telepat `new` object whose id is the key.
            try await create(simperium, key: "simp1", object: ["title": "from simperium"])
            let simperiumNew = try objectOf(try await peer.nextMessage()?["data"]?["new"]?.arrayValue?.first)
            #expect(simperiumNew["id"] == "simp1" && simperiumNew["title"] == "from simperium" && simperiumNew["type"] == "task")

            // Both sides now hold the same objects.
            let (_, listed) = try await peer.http("POST", "/object/subscribe", headers: headers, body: .object(["channel": channel, "no_subscribe": true]))
            let telepatObjects = try #require(listed["content"]?.arrayValue).compactMap(\.objectValue)
            let index = try await simperium.receiveMessage(after: "0:i:1:::100")
            guard case .channel(0, .index(let page)) = index else { throw TestFailure("expected an index page, got \(index)") }
            #expect(Set(telepatObjects.compactMap { $0["id"]?.stringValue }) == Set(page.index.map(\.id)))
            for entry in page.index {
                let telepat = try #require(telepatObjects.first { $0["id"]?.stringValue == entry.id })
                for (key, value) in try #require(entry.data) { #expect(telepat[key] == value, "\(entry.id).\(key)") }
            }
            let (_, counted) = try await peer.http("POST", "/object/count", headers: headers, body: .object(["channel": channel]))
            #expect(counted["content"]?["count"] == .integer(2))

            // Telepat delete: a `deleted` notification and a Simperium remove.
            let (deleted, _) = try await peer.http("DELETE", "/object/delete", headers: headers, body: .object(["context": "c1", "model": "task", "id": .string(id)]))
            #expect(deleted == 202)
            let gone = try objectOf(try await peer.nextMessage()?["data"]?["deleted"]?.arrayValue?.first)
            #expect(gone["id"] == .string(id) && gone["title"] == "three")
            let simperiumRemove = try appliedChange(try await simperium.receiveMessage())
            #expect(simperiumRemove.id == id && simperiumRemove.operation == .remove)

            // Simperium remove: a Telepat `deleted` notification.
            _ = try await simperium.request(#"0:c:{"id":"simp1","o":"-","sv":1,"ccid":"remove-simp1"}"#)
            let simperiumGone = try objectOf(try await peer.nextMessage()?["data"]?["deleted"]?.arrayValue?.first)
            #expect(simperiumGone["id"] == "simp1")
            let (_, none) = try await peer.http("POST", "/object/count", headers: headers, body: .object(["channel": channel]))
            #expect(none["content"]?["count"] == .integer(0))
        }
    }

    /// An application's objects are shared by all its users, as on Telepat: every route that
    /// reads or writes objects (create, update, delete, subscribe, count) works on the same
    /// objects whichever user calls; each object keeps its creator's `user_id`; notifications
    /// reach every subscribed user; the owner's Simperium bucket holds them, both ways, and the
    /// calling user's own account holds nothing.
    @Test(arguments: StoreKind.allCases)
    func anApplicationsObjectsAreSharedByAllItsUsers(store: StoreKind) async throws {
        try await withServer(store: store, configure: Self.configure) { server in
            let annToken = try await makeUser(server, "ann")
            _ = try await makeUser(server, "bob")
            let owner = try await owner(server)
            let simperium = try await server.socket()
            defer { Task { await simperium.close() } }
            _ = try await simperium.authorize(token: owner.token, bucket: "c1.task")
            let (ann, annHeaders) = try await telepatClient(server, user: "ann")
            defer { Task { await ann.close() } }
            let (bob, bobHeaders) = try await telepatClient(server, user: "bob")
            defer { Task { await bob.close() } }
            let users = [(ann, annHeaders), (bob, bobHeaders)]
            let channel: JSONValue = .object(["context": "c1", "model": "task"])
            var publicIDs: [String] = []
            for (peer, headers) in users {
                let (status, _) = try await peer.http("POST", "/object/subscribe", headers: headers, body: .object(["channel": channel]))
                #expect(status == 200)
                let (_, me) = try await peer.http("GET", "/user/me", headers: headers, body: nil)
                publicIDs.append(try #require(me["content"]?["id"]?.stringValue))
            }
            let (annID, bobID) = (publicIDs[0], publicIDs[1])
            #expect(annID != bobID)

            func created(_ peer: TelepatPeer) async throws -> JSONObject { try objectOf(try await peer.nextMessage()?["data"]?["new"]?.arrayValue?.first) }

            // ann creates: both users hear of it; the object is ann's, in the owner's account.
            let (made, _) = try await ann.http("POST", "/object/create", headers: annHeaders, body: .object([
                "context": "c1", "model": "task", "content": .object(["title": "ann's"]),
            ]))
            #expect(made == 202)
            let annSees = try await created(ann)
            let bobSees = try await created(bob)
            #expect(annSees == bobSees && bobSees["user_id"] == .string(annID) && bobSees["title"] == "ann's")
            let id = try #require(bobSees["id"]?.stringValue)
            #expect(try appliedChange(try await simperium.receiveMessage()).id == id)
            let annAccount = try #require(try await server.store.user(forToken: annToken))
            #expect(try await server.store.entity(bucket: try await server.store.openBucket(userID: annAccount.id, name: "c1.task"), key: id) == nil)
            let shared = try await server.store.openBucket(userID: owner.id, name: "c1.task")
            #expect(try await server.store.entity(bucket: shared, key: id)?.data?["title"] == "ann's")

            // bob updates ann's object: both hear the patch, Simperium gets a new version.
            let (updated, _) = try await bob.http("POST", "/object/update", headers: bobHeaders, body: .object([
                "context": "c1", "model": "task", "id": .string(id), "patches": .array([
                    .object(["op": "replace", "path": .string("task/\(id)/title"), "value": "bob's edit"]),
                ]),
            ]))
            #expect(updated == 202)
            let edit: JSONValue = .object(["op": "replace", "path": .string("task/\(id)/title"), "value": "bob's edit"])
            for (peer, _) in users {
                let patches = try #require(try await peer.nextMessage()?["data"]?["updated"]?.arrayValue).compactMap { $0["patch"] }
                #expect(patches.contains(edit))
            }
            let simperiumUpdate = try appliedChange(try await simperium.receiveMessage())
            #expect(simperiumUpdate.id == id && simperiumUpdate.endVersion == 2)

            // The owner's Simperium client creates: both users hear of it.
            try await create(simperium, key: "from-owner", object: ["title": "owner's"])
            #expect(try await created(ann)["id"] == "from-owner")
            #expect(try await created(bob)["id"] == "from-owner")

            // bob creates his own: counts and lists agree whoever asks; a user's channel narrows both.
            _ = try await bob.http("POST", "/object/create", headers: bobHeaders, body: .object([
                "context": "c1", "model": "task", "content": .object(["title": "bob's"]),
            ]))
            let bobsObject = try await created(ann)
            #expect(try await created(bob) == bobsObject && bobsObject["user_id"] == .string(bobID))
            _ = try await simperium.receiveMessage()
            for (peer, headers) in users {
                let (_, counted) = try await peer.http("POST", "/object/count", headers: headers, body: .object(["channel": channel]))
                #expect(counted["content"]?["count"] == .integer(3))
                let (_, listed) = try await peer.http("POST", "/object/subscribe", headers: headers, body: .object(["channel": channel, "no_subscribe": true]))
                #expect(Set(try #require(listed["content"]?.arrayValue).compactMap { $0["id"]?.stringValue }) == [id, "from-owner", try #require(bobsObject["id"]?.stringValue)])
                let annOnly: JSONValue = .object(["context": "c1", "model": "task", "user": .string(annID)])
                let (_, annsCount) = try await peer.http("POST", "/object/count", headers: headers, body: .object(["channel": annOnly]))
                #expect(annsCount["content"]?["count"] == .integer(1))
                let (_, annsList) = try await peer.http("POST", "/object/subscribe", headers: headers, body: .object(["channel": annOnly, "no_subscribe": true]))
                #expect(annsList["content"]?.arrayValue?.compactMap { $0["id"]?.stringValue } == [id])
            }

            // ann unsubscribes; bob deletes ann's object: bob and the owner hear of it, ann does not.
            let (unsubscribed, _) = try await ann.http("POST", "/object/unsubscribe", headers: annHeaders, body: .object(["channel": channel]))
            #expect(unsubscribed == 200)
            let (deleted, _) = try await bob.http("DELETE", "/object/delete", headers: bobHeaders, body: .object(["context": "c1", "model": "task", "id": .string(id)]))
            #expect(deleted == 202)
            #expect(try objectOf(try await bob.nextMessage()?["data"]?["deleted"]?.arrayValue?.first)["id"] == .string(id))
            let removal = try appliedChange(try await simperium.receiveMessage())
            #expect(removal.id == id && removal.operation == .remove)
            #expect(try await ann.quiet(seconds: 0.5).isEmpty)
            let (_, left) = try await ann.http("POST", "/object/count", headers: annHeaders, body: .object(["channel": channel]))
            #expect(left["content"]?["count"] == .integer(2))
        }
    }

    /// The owner: a default one is made once (its name is then taken, so no one can register it
    /// and read the application's objects); one the settings name must exist.
    @Test(arguments: StoreKind.allCases)
    func anApplicationsOwnerIsMadeOnceOrMustExistWhenNamed(store: StoreKind) async throws {
        try await withServer(store: store) { server in
            let fallback = TelepatSettings.Application(id: "app", apiKey: "k", contexts: [])
            #expect(fallback.owner == "telepat:app" && !fallback.ownerDeclared)
            let made = try await TelepatOwners.ensure(fallback, store: server.store)
            #expect(try await TelepatOwners.ensure(fallback, store: server.store) == made)
            await #expect(throws: SyncServerError.userExists("telepat:app")) {
                _ = try await server.store.createUser(username: "telepat:app", password: "a guess")
            }
            let named = TelepatSettings.Application(id: "app2", apiKey: "k", contexts: [], owner: "carol")
            await #expect(throws: TelepatOwners.Missing.self) { _ = try await TelepatOwners.ensure(named, store: server.store) }
            #expect(try await server.store.user(named: "carol") == nil)
            _ = try await makeUser(server, "carol")
            let carol = try #require(try await server.store.user(named: "carol"))
            #expect(try await TelepatOwners.ensure(named, store: server.store) == carol.id)
        }
    }

    @Test func settingsNameTheOwnerAndTheTokenLifetime() throws {
        let parsed = try TelepatSettings(parsing: Array(#"""
            {"applications": [{"id": "a", "api_key": "k", "owner": "team@example.com"}, {"id": "b", "api_key": "k"}],
             "token_lifetime": 60}
            """#.utf8))
        #expect(parsed.applications["a"]?.owner == "team@example.com" && parsed.applications["a"]?.ownerDeclared == true)
        #expect(parsed.applications["b"]?.owner == "telepat:b" && parsed.applications["b"]?.ownerDeclared == false)
        #expect(parsed.tokenLifetime == 60)
        for bad in [
            #"{"applications": [{"id": "a", "api_key": "k", "owner": 7}]}"#,
            #"{"applications": [{"id": "a", "api_key": "k", "owner": "\"quoted\""}]}"#,
            #"{"applications": [{"id": "a", "api_key": "k"}], "token_lifetime": 0}"#,
            #"{"applications": [{"id": "a", "api_key": "k"}], "token_lifetime": "1h"}"#,
        ] {
            #expect(throws: TelepatSettings.Invalid.self, "\(bad)") { _ = try TelepatSettings(parsing: Array(bad.utf8)) }
        }
    }

    @Test func serveRefusesADeclaredOwnerWithoutAnAccount() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let settings = directory.path + "/telepat.json"
        try Data(#"{"applications": [{"id": "tp-app", "api_key": "tp-key", "owner": "nobody@example.com"}]}"#.utf8)
            .write(to: URL(fileURLWithPath: settings))
        do {
            let server = try await ServeBinary(data: directory.path, extraArguments: ["--telepat", settings])
            server.stop()
            Issue.record("serve started with an owner that has no account")
        } catch let failure as TestFailure {
            #expect(failure.description.contains("\"nobody@example.com\" of Telepat application tp-app has no account"), "\(failure)")
        }
    }

    /// `increment` adds and `append` appends, on the server: Telepat subscribers hear the results
    /// (as `replace` patches, as Telepat 0.4.1 sends them) and the owner's Simperium client gets
    /// them as a change. A patch the object cannot take is refused with Telepat's error shape,
    /// the whole update with it (an earlier good patch of the same update included), and nothing
    /// stored changes.
    @Test(arguments: StoreKind.allCases)
    func incrementAndAppendApplyTheirMeaningAndBadOnesChangeNothing(store: StoreKind) async throws {
        try await withServer(store: store, configure: Self.configure) { server in
            _ = try await makeUser(server, "ann")
            let owner = try await owner(server)
            let simperium = try await server.socket()
            defer { Task { await simperium.close() } }
            _ = try await simperium.authorize(token: owner.token, bucket: "c1.task")
            let (peer, headers) = try await telepatClient(server)
            defer { Task { await peer.close() } }
            let channel: JSONValue = .object(["context": "c1", "model": "task"])
            _ = try await peer.http("POST", "/object/subscribe", headers: headers, body: .object(["channel": channel]))
            _ = try await peer.http("POST", "/object/create", headers: headers, body: .object([
                "context": "c1", "model": "task", "content": .object(["n": .integer(1), "tags": .array(["a"]), "title": "ab"]),
            ]))
            let object = try objectOf(try await peer.nextMessage()?["data"]?["new"]?.arrayValue?.first)
            let id = try #require(object["id"]?.stringValue)
            _ = try await simperium.receiveMessage()

            func update(_ patches: [(String, String, JSONValue)]) async throws -> (Int, JSONValue) {
                try await peer.http("POST", "/object/update", headers: headers, body: .object([
                    "context": "c1", "model": "task", "id": .string(id), "patches": .array(patches.map { op, key, value in
                        .object(["op": .string(op), "path": .string("task/\(id)/\(key)"), "value": value])
                    }),
                ]))
            }
            let (status, _) = try await update([
                ("increment", "n", .integer(2)), ("increment", "n", .double(0.5)), ("append", "tags", "b"),
                ("append", "title", "cd"), ("append", "fresh", .integer(1)), ("increment", "count", .integer(-4)),
            ])
            #expect(status == 202)
            let expected: JSONObject = ["n": .double(3.5), "tags": .array(["a", "b"]), "title": "abcd", "fresh": .array([1]), "count": .integer(-4)]
            let patches = try #require(try await peer.nextMessage()?["data"]?["updated"]?.arrayValue).compactMap { $0["patch"] }
            for (key, value) in expected {
                #expect(patches.contains(.object(["op": "replace", "path": .string("task/\(id)/\(key.string)"), "value": value])), "\(key)")
            }
            let change = try appliedChange(try await simperium.receiveMessage())
            let simperiumSees = try JSONDiffing.apply(try #require(change.diff), to: object)
            let bucket = try await server.store.openBucket(userID: owner.id, name: "c1.task")
            let stored = try #require(try await server.store.entity(bucket: bucket, key: id))
            #expect(stored.data == simperiumSees)
            for (key, value) in expected { #expect(simperiumSees[key] == value, "\(key)") }

            let refusals: [([(String, String, JSONValue)], String)] = [
                ([("increment", "title", .integer(1))], "048"),
                ([("increment", "tags", .integer(1))], "048"),
                ([("append", "title", .integer(1))], "048"),
                ([("append", "n", "x")], "048"),
                ([("increment", "n", "1")], "004"),
                ([("replace", "title", "lost"), ("increment", "title", .integer(1))], "048"),
                ([("append", "tags", "lost"), ("append", "n", .array([]))], "048"),
            ]
            for (patches, code) in refusals {
                let (answered, error) = try await update(patches)
                #expect(answered == 400 && error["status"] == .integer(400) && error["code"] == .string(code), "\(patches): \(error)")
                #expect(error["message"]?.stringValue?.isEmpty == false)
            }
            #expect(try await server.store.entity(bucket: bucket, key: id) == stored)
            #expect(try await peer.quiet(seconds: 0.5).isEmpty)
        }
    }

    /// `filters` and `sort` of a subscribe (and a count's `filters`): the answer holds the
    /// objects that pass, in order, before `offset` and `limit`; the device hears only of objects
    /// that pass; subscribing to the channel again replaces its filters; malformed filters or
    /// sort get Telepat's error shape and subscribe nothing.
    @Test func subscriptionFiltersAndSortSelectTheObjectsAndTheNotifications() async throws {
        try await withServer(store: .sqlite, configure: Self.configure) { server in
            _ = try await makeUser(server, "ann")
            let (peer, headers) = try await telepatClient(server)
            defer { Task { await peer.close() } }
            let channel: JSONValue = .object(["context": "c1", "model": "task"])
            func create(_ title: String, _ status: String, _ priority: Int64) async throws {
                let (status, _) = try await peer.http("POST", "/object/create", headers: headers, body: .object([
                    "context": "c1", "model": "task", "content": .object(["title": .string(title), "status": .string(status), "priority": .integer(priority)]),
                ]))
                #expect(status == 202)
            }
            func titles(_ answer: JSONValue) -> [String] { answer["content"]?.arrayValue?.compactMap { $0["title"]?.stringValue } ?? [] }
            func created() async throws -> String? { try objectOf(try await peer.nextMessage()?["data"]?["new"]?.arrayValue?.first)["title"]?.stringValue }
            for (title, status, priority) in [("a", "open", 3), ("b", "done", 1), ("c", "open", 2), ("d", "open", 5)] as [(String, String, Int64)] {
                try await create(title, status, priority)
            }
            let open: JSONValue = try JSONValue(parsing: #"{"and": [{"is": {"status": "open"}}, {"range": {"priority": {"lte": 3}}}]}"#)
            let byPriority: JSONValue = .object(["priority": "desc"])
            let (subscribed, answer) = try await peer.http("POST", "/object/subscribe", headers: headers, body: .object([
                "channel": channel, "filters": open, "sort": byPriority,
            ]))
            #expect(subscribed == 200 && titles(answer) == ["a", "c"])
            let (_, page) = try await peer.http("POST", "/object/subscribe", headers: headers, body: .object([
                "channel": channel, "filters": open, "sort": byPriority, "offset": 1, "limit": 1, "no_subscribe": true,
            ]))
            #expect(titles(page) == ["c"])
            let (_, sorted) = try await peer.http("POST", "/object/subscribe", headers: headers, body: .object([
                "channel": channel, "sort": .object(["title": "desc"]), "no_subscribe": true,
            ]))
            #expect(titles(sorted) == ["d", "c", "b", "a"])
            let (_, counted) = try await peer.http("POST", "/object/count", headers: headers, body: .object(["channel": channel, "filters": open]))
            #expect(counted["content"]?["count"] == .integer(2))

            // Only objects that pass are notified: e does not, f does (and comes first).
            try await create("e", "done", 1)
            try await create("f", "open", 2)
            #expect(try await created() == "f")

            // Malformed filters or sort: refused, nothing subscribed or changed.
            for body: JSONValue in [
                .object(["channel": channel, "filters": .object(["is": .object(["status": "open"])])]),
                .object(["channel": channel, "filters": try JSONValue(parsing: #"{"and": [{"range": {"priority": {"about": 2}}}]}"#)]),
                .object(["channel": channel, "sort": .object(["priority": "sideways"])]),
            ] {
                let (status, error) = try await peer.http("POST", "/object/subscribe", headers: headers, body: body)
                #expect(status == 400 && error["code"] == "004", "\(body.compactRendered()): \(error)")
            }
            let (badCount, countError) = try await peer.http("POST", "/object/count", headers: headers, body: .object(["channel": channel, "filters": .array([])]))
            #expect(badCount == 400 && countError["code"] == "004")
            try await create("g", "open", 1)
            #expect(try await created() == "g")

            // Subscribed again with other filters: a channel of its own, beside the first (issue
            // 36; it used to replace it): i is notified for the first, h for the second.
            let done: JSONValue = try JSONValue(parsing: #"{"and": [{"is": {"status": "done"}}]}"#)
            let (_, doneAnswer) = try await peer.http("POST", "/object/subscribe", headers: headers, body: .object(["channel": channel, "filters": done]))
            #expect(titles(doneAnswer) == ["b", "e"] || titles(doneAnswer) == ["e", "b"])
            try await create("i", "open", 1)
            #expect(try await created() == "i")
            try await create("h", "done", 1)
            #expect(try await created() == "h")
            // The same filters again: the same channel, still notified once.
            _ = try await peer.http("POST", "/object/subscribe", headers: headers, body: .object(["channel": channel, "filters": done]))
            try await create("j", "done", 9)
            let message = try #require(try await peer.nextMessage())
            #expect(message["data"]?["new"]?.arrayValue?.compactMap { $0["object"]?["title"]?.stringValue } == ["j"])
            #expect(try await peer.quiet(seconds: 0.5).isEmpty)
        }
    }

    /// `/user/logout` revokes the token it carries (and only that one): every user route then
    /// refuses it as an expired one; another token of the same user, or a new login, still works.
    @Test func logoutRevokesItsToken() async throws {
        try await withServer(store: .sqlite, configure: Self.configure) { server in
            _ = try await makeUser(server, "ann")
            let (peer, headers) = try await telepatClient(server, connected: false)
            defer { Task { await peer.close() } }
            let (_, again) = try await peer.http(
                "POST", "/user/login-password", headers: Self.headers, body: .object(["username": "ann", "password": "secret-ann"]))
            var other = headers
            other["Authorization"] = "Bearer " + (try #require(again["content"]?["token"]?.stringValue))
            let (me, _) = try await peer.http("GET", "/user/me", headers: headers, body: nil)
            #expect(me == 200)
            let (out, answer) = try await peer.http("POST", "/user/logout", headers: headers, body: nil)
            #expect(out == 200 && answer["content"] == "Logged out")
            for (method, path, body) in [
                ("GET", "/user/me", nil), ("GET", "/user/refresh_token", nil), ("POST", "/user/logout", nil),
                ("POST", "/object/count", .object(["channel": .object(["context": "c1", "model": "task"])])),
            ] as [(String, String, JSONValue?)] {
                let (status, error) = try await peer.http(method, path, headers: headers, body: body)
                #expect(status == 401 && error["code"] == "014", "\(path): \(error)")
            }
            let (stillIn, _) = try await peer.http("GET", "/user/me", headers: other, body: nil)
            #expect(stillIn == 200)
        }
    }

    @Test func badInputGetsTelepatsErrorShapeAndChangesNothing() async throws {
        try await withServer(store: .sqlite, configure: Self.configure) { server in
            let simperiumToken = try await makeUser(server, "ann")
            let (peer, headers) = try await telepatClient(server)
            defer { Task { await peer.close() } }
            let channel: JSONValue = .object(["context": "c1", "model": "task"])
            _ = try await peer.http("POST", "/object/subscribe", headers: headers, body: .object(["channel": channel]))
            _ = try await peer.http("POST", "/object/create", headers: headers, body: .object([
                "context": "c1", "model": "task", "content": .object(["title": "kept"]),
            ]))
            let id = try #require(try objectOf(try await peer.nextMessage()?["data"]?["new"]?.arrayValue?.first)["id"]?.stringValue)
            let user = try #require(try await server.store.user(forToken: simperiumToken))
            let bucket = try await server.store.openBucket(userID: try await owner(server).id, name: "c1.task")
            let before = try await server.store.entity(bucket: bucket, key: id)

            func patch(_ op: String, _ key: String, _ value: JSONValue) -> JSONValue {
                .object(["context": "c1", "model": "task", "id": .string(id), "patches": .array([
                    .object(["op": .string(op), "path": .string("task/\(id)/\(key)"), "value": value]),
                ])])
            }
            var wrongSign = headers
            wrongSign["X-BLGREQ-SIGN"] = String(repeating: "0", count: 64)
            var wrongApp = headers
            wrongApp["X-BLGREQ-APPID"] = "other-app"
            var noToken = headers
            noToken["Authorization"] = nil
            let now = Int64(Date().timeIntervalSince1970)
            var expired = headers
            expired["Authorization"] = "Bearer " + TelepatToken(username: "ann", userID: user.id, publicID: "x", expires: now - 1)
                .signed(secret: Self.secret, issuedAt: now - 3601)
            var forged = headers
            forged["Authorization"] = "Bearer " + TelepatToken(username: "ann", userID: user.id, publicID: "x", expires: now + 3600)
                .signed(secret: Array("another-secret".utf8), issuedAt: now)
            let big = JSONValue.string(String(repeating: "x", count: 8192))

            let cases: [(String, String, [String: String], JSONValue?, Int, String)] = [
                ("POST", "/object/frobnicate", headers, .object([:]), 404, "002"),
                ("GET", "/user/nothing", headers, nil, 404, "002"),
                ("POST", "/object/update", wrongSign, patch("replace", "title", "lost"), 401, "007"),
                ("POST", "/object/update", wrongApp, patch("replace", "title", "lost"), 401, "006"),
                ("POST", "/object/update", noToken, patch("replace", "title", "lost"), 401, "013"),
                ("POST", "/object/update", expired, patch("replace", "title", "lost"), 401, "014"),
                ("POST", "/object/update", forged, patch("replace", "title", "lost"), 401, "014"),
                ("POST", "/object/update", headers, patch("set", "title", "lost"), 400, "004"),
                ("POST", "/object/update", headers, .object(["context": "c1", "model": "task", "id": .string(id), "patches": .array([.object(["op": "replace", "path": "task/title", "value": "lost"])])]), 400, "004"),
                ("POST", "/object/update", headers, .string("{not json"), 400, "004"),
                ("POST", "/object/update", headers, patch("increment", "title", .integer(1)), 400, "048"),
                ("POST", "/object/update", headers, patch("replace", "id", "lost"), 400, "038"),
                ("POST", "/object/update", headers, patch("replace", "created", .integer(0)), 400, "038"),
                ("POST", "/object/update", headers, patch("replace", "context_id", "c2"), 400, "038"),
                ("POST", "/object/update", headers, patch("replace", "title", big), 413, "049"),
                ("POST", "/object/create", headers, .object(["context": "c1", "model": "task", "content": .object(["title": big])]), 413, "049"),
                ("POST", "/object/create", headers, .object(["context": "c1", "model": "nope", "content": .object([:])]), 404, "035"),
                ("POST", "/object/create", headers, .object(["context": "c9", "model": "task", "content": .object([:])]), 404, "033"),
                ("POST", "/object/update", headers, .object(["context": "c1", "model": "task", "id": "missing", "patches": .array([.object(["op": "replace", "path": "task/missing/title", "value": "x"])])]), 404, "034"),
                ("DELETE", "/object/delete", headers, .object(["context": "c1", "model": "task", "id": "missing"]), 404, "034"),
                ("POST", "/user/login-password", Self.headers, .object(["username": "ann", "password": "wrong"]), 401, "023"),
            ]
            for (method, path, headers, body, status, code) in cases {
                let (answered, error) = try await peer.http(method, path, headers: headers, body: body)
                #expect(answered == status, "\(method) \(path) \(body?.compactRendered() ?? "")")
                #expect(error["status"] == .integer(Int64(status)) && error["code"] == .string(code), "\(path): \(error)")
                #expect(error["message"]?.stringValue?.isEmpty == false)
            }
            #expect(try await server.store.entity(bucket: bucket, key: id) == before)
            #expect(try await peer.quiet(seconds: 0.5).isEmpty)
            let (_, counted) = try await peer.http("POST", "/object/count", headers: headers, body: .object(["channel": channel]))
            #expect(counted["content"]?["count"] == .integer(1))
        }
    }

    /// Swift-side HTTP, for many requests at once, on a connection of its own that waits as long
    /// as a loaded machine needs (the in-process server's test client gives up on a read after
    /// 20 s: 16 updates on PostgreSQL, with other builds beside the tests, took longer).
    private func post(_ client: TestClient, _ path: String, headers: [String: String], body: JSONValue) async throws -> (Int, JSONValue) {
        var fields = HTTPFields()
        for (name, value) in headers { fields[HTTPField.Name(name)!] = value }
        let response = try await client.execute(
            TestClient.Request(path, method: .post, headers: fields, body: ByteBuffer(bytes: body.compactRenderedBytes())))
        return (Int(response.status.code), try JSONValue(parsing: Array((response.body ?? ByteBuffer()).readableBytesView)))
    }

    @Test(arguments: StoreKind.allCases)
    func concurrentUpdatesOfDifferentKeysAndIncrementsAllSurvive(store: StoreKind) async throws {
        try await withServer(store: store, configure: Self.configure) { server in
            _ = try await makeUser(server, "ann")
            let (peer, headers) = try await telepatClient(server, connected: false)
            await peer.close()
            try await withPatientClient(server) { client in
                let (created, _) = try await post(client, "/object/create", headers: headers, body: .object([
                    "context": "c1", "model": "task", "content": .object(["title": "shared"]),
                ]))
                #expect(created == 202)
                let (_, listed) = try await post(client, "/object/subscribe", headers: headers, body: .object([
                    "channel": .object(["context": "c1", "model": "task"]), "no_subscribe": true,
                ]))
                let id = try #require(listed["content"]?.arrayValue?.first?["id"]?.stringValue)
                // Every update reads the object, then commits against that version: the ones that
                // lose the race are rebased over the others, so each key keeps its last write and
                // every increment counts.
                try await withThrowingTaskGroup(of: Int.self) { group in
                    for n in 0..<16 {
                        group.addTask {
                            try await post(client, "/object/update", headers: headers, body: .object([
                                "context": "c1", "model": "task", "id": .string(id), "patches": .array([
                                    .object(["op": "replace", "path": .string("task/\(id)/k\(n)"), "value": .integer(Int64(n))]),
                                    .object(["op": "increment", "path": .string("task/\(id)/hits"), "value": .integer(1)]),
                                ]),
                            ])).0
                        }
                    }
                    for try await status in group { #expect(status == 202) }
                }
                let (_, after) = try await post(client, "/object/subscribe", headers: headers, body: .object([
                    "channel": .object(["context": "c1", "model": "task", "id": .string(id)]), "no_subscribe": true,
                ]))
                let object = try #require(after["content"]?.arrayValue?.first?.objectValue)
                for n in 0..<16 { #expect(object[JSONKey("k\(n)")] == .integer(Int64(n)), "k\(n)") }
                #expect(object["title"] == "shared")
                // Increments rebased over each other add up (the jsondiff of a number is a delta).
                #expect(object["hits"] == .integer(16))
            }
        }
    }

    /// Runs `body` with a client of its own (`post`), shut down after it whatever happens.
    private func withPatientClient(_ server: RunningServer, _ body: (TestClient) async throws -> Void) async throws {
        let client = TestClient(host: "127.0.0.1", port: server.port, configuration: .init(timeout: .seconds(300)))
        client.connect()
        do {
            try await body(client)
        } catch {
            try? await client.shutdown()
            throw error
        }
        try await client.shutdown()
    }

    @Test func devicesAreKeptAcrossRestarts() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path + "/telepat-devices.json"
        let logger = Logger(label: "test")
        let first = TelepatDevices(path: path, logger: logger)
        let fresh = first.register(existing: nil, registration: DeviceRegistration(info: ["os": "linux"]))
        let own = first.register(existing: nil, registration: DeviceRegistration(info: ["udid": "phone-1"]))
        #expect(own == "phone-1")
        let again = TelepatDevices(path: path, logger: logger)
        #expect(again.register(existing: fresh, registration: DeviceRegistration(info: ["os": "linux", "version": "2"])) == fresh)
        #expect(again.register(existing: nil, registration: DeviceRegistration(info: ["udid": "phone-1"])) == "phone-1")
        #expect(again.register(existing: "unknown", registration: DeviceRegistration(info: [:])) != fresh)
    }

    @Test func theSocketAnswersPingsBindsDevicesAndClosesSilentOrMalformedPeers() async throws {
        let statistics = ServerStatistics()
        try await withServer(store: .sqlite, configure: {
            Self.configure(&$0, pingInterval: .seconds(5))
            $0.statistics = statistics
        }) { server in
            let path = "/socket.io/?EIO=3&transport=websocket"
            let socket = try await TestSocket.connect(port: server.port, appID: "", path: path)
            guard case .open(let handshake) = try EngineIOPacket.parse(try await socket.receive()) else {
                throw TestFailure("expected the Engine.IO open packet first")
            }
            // Counted among the server's WebSockets while open.
            #expect(statistics.openWebSockets == 1)
            #expect(handshake.pingInterval == 5000 && !handshake.sessionID.isEmpty)
            #expect(try await socket.receive() == "40")
            #expect(try await socket.request("2") == "3")
            #expect(try await socket.request("2probe") == "3probe")
            let refused = try TelepatSocketEvent.parse(frame: try await socket.request(
                TelepatSocketEvent.bindDevice(deviceID: "d1", applicationID: "other-app").frame))
            guard case .other("error", let arguments) = refused else { throw TestFailure("expected an error event, got \(refused)") }
            #expect(arguments.first?["code"] == "006")
            // A device the API never registered is refused too (issue 36); a registered one is bound.
            let unknown = try TelepatSocketEvent.parse(frame: try await socket.request(
                TelepatSocketEvent.bindDevice(deviceID: "d1", applicationID: Self.appID).frame))
            guard case .other("error", let unknownArguments) = unknown else { throw TestFailure("expected an error event, got \(unknown)") }
            #expect(unknownArguments.first?["code"] == "025")
            var registration = HTTPFields()
            for (name, value) in Self.headers { registration[HTTPField.Name(name)!] = value }
            let registered = try await server.client.execute(
                uri: "/device/register", method: .post, headers: registration, body: ByteBuffer(string: #"{"info":{}}"#))
            let device = try #require(try JSONValue(parsing: Array(registered.body.readableBytesView))["content"]?["identifier"]?.stringValue)
            #expect(try TelepatSocketEvent.parse(frame: try await socket.request(
                TelepatSocketEvent.bindDevice(deviceID: device, applicationID: Self.appID).frame)) == .ready)
            // A malformed Socket.IO packet is answered with an error packet; the socket stays.
            #expect(try await socket.request("42{not an event").hasPrefix("44"))
            #expect(try await socket.request("2") == "3")
            // Silent past pingInterval + pingTimeout (5 s + 5 s here; 2 s + 2 s, and 1 s + 1 s before
            // it, lost the socket to the in-process group's stalls between two requests): closed,
            // not before.
            try await Task.sleep(for: .milliseconds(700))
            #expect(await !socket.isEnded)
            _ = try await socket.waitForClose(timeout: .seconds(25))
            await socket.close()
            let deadline = ContinuousClock.now + hangGuard
            while statistics.openWebSockets > 0, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
            #expect(statistics.openWebSockets == 0)

            // A packet that is not Engine.IO at all ends the connection.
            let garbage = try await TestSocket.connect(port: server.port, appID: "", path: path)
            _ = try await garbage.receive()
            _ = try await garbage.receive()
            garbage.send("x")
            _ = try await garbage.waitForClose(timeout: .seconds(5))
            await garbage.close()
        }
    }

    /// The client pings less often than the HTTP request timeout (6 s): the socket's deadline
    /// is Engine.IO's (pingInterval + pingTimeout, 10 s + 10 s here, room for a loaded machine's
    /// stalls), not the HTTP one, which still closes a plain connection. It used to cut every
    /// socket at the latter. The request timeout is not shorter: the upgrade is a request, and
    /// loaded runs of this group took over 2 s, and once over 4 s (beside a model run and
    /// stress-ng), to complete one.
    @Test func aPingingSocketOutlivesTheRequestTimeoutAndASilentOneIsStillClosed() async throws {
        try await withServer(store: .sqlite, configure: {
            // Silence closes a socket after 10 s + 10 s: a wide margin over the 7 s between pings
            // below, which a loaded run (this group runs its tests side by side) stretched past 5 + 5.
            Self.configure(&$0, pingInterval: .seconds(10))
            $0.requestTimeout = .seconds(6)
        }) { server in
            let plain = try await RawTCP.open(port: server.port)
            let socket = try await TestSocket.connect(port: server.port, appID: "", path: "/socket.io/?EIO=3&transport=websocket")
            guard case .open(let handshake) = try EngineIOPacket.parse(try await socket.receive()) else {
                throw TestFailure("expected the Engine.IO open packet first")
            }
            #expect(handshake.pingInterval == 10000 && handshake.pingTimeout == 10000)
            #expect(try await socket.receive() == "40")
            // Three pings 7 s apart: 21 s, over 3x the request timeout, each gap longer than it.
            for _ in 0..<3 {
                try await Task.sleep(for: .seconds(7))
                #expect(try await socket.request("2") == "3")
            }
            // The plain HTTP connection, idle all along, was closed by its deadline.
            #expect(await plain.readUntilClosed(within: .seconds(10)) != nil)
            // Silent now: still open past the request timeout, closed after 10 s + 10 s.
            try await Task.sleep(for: .seconds(7))
            #expect(await !socket.isEnded)
            _ = try await socket.waitForClose(timeout: .seconds(40))
            await socket.close()
        }
    }

    @Test func theServeCommandKeepsDevicesTokensAndObjectsAcrossARestart() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let settings = directory.path + "/telepat.json"
        try Data(#"""
            {"applications": [{"id": "tp-app", "api_key": "tp-key", "contexts": [{"id": "c1", "name": "Tasks", "models": ["task"]}]}],
             "jwt_secret": "restart-secret"}
            """#.utf8).write(to: URL(fileURLWithPath: settings))
        let arguments = ["--telepat", settings]
        var server = try await ServeBinary(data: directory.path, extraArguments: arguments)
        defer { server.stop() }
        var peer = try TelepatPeer(port: server.port)
        let (registeredUser, _) = try await peer.http("POST", "/user/register-username", headers: Self.headers, body: .object(["username": "bob", "password": "pw-bob-1"]))
        #expect(registeredUser == 202)
        let (_, registered) = try await peer.http("POST", "/device/register", headers: Self.headers, body: .object(["info": .object([:])]))
        let device = try #require(registered["content"]?["identifier"]?.stringValue)
        let (_, login) = try await peer.http("POST", "/user/login-password", headers: Self.headers, body: .object(["username": "bob", "password": "pw-bob-1"]))
        var headers = Self.headers
        headers["X-BLGREQ-UDID"] = device
        headers["Authorization"] = "Bearer " + (try #require(login["content"]?["token"]?.stringValue))
        let (created, _) = try await peer.http("POST", "/object/create", headers: headers, body: .object([
            "context": "c1", "model": "task", "content": .object(["title": "survives"]),
        ]))
        #expect(created == 202)
        let (_, second) = try await peer.http("POST", "/user/login-password", headers: Self.headers, body: .object(["username": "bob", "password": "pw-bob-1"]))
        var loggedOut = headers
        loggedOut["Authorization"] = "Bearer " + (try #require(second["content"]?["token"]?.stringValue))
        let (out, _) = try await peer.http("POST", "/user/logout", headers: loggedOut, body: nil)
        #expect(out == 200)
        await peer.close()

        #expect(await server.signal(SIGTERM, within: .seconds(20)) != nil)
        server = try await ServeBinary(data: directory.path, extraArguments: arguments)
        peer = try TelepatPeer(port: server.port)
        defer { Task { [peer] in await peer.close() } }
        // The same device is recognised, the token (same secret) still works, the object is there.
        var again = Self.headers
        again["X-BLGREQ-UDID"] = device
        let (_, reregistered) = try await peer.http("POST", "/device/register", headers: again, body: .object(["info": .object(["os": "linux"])]))
        #expect(reregistered["content"]?["identifier"]?.stringValue == device)
        let (status, listed) = try await peer.http("POST", "/object/subscribe", headers: headers, body: .object([
            "channel": .object(["context": "c1", "model": "task"]),
        ]))
        #expect(status == 200)
        #expect(listed["content"]?.arrayValue?.compactMap { $0["title"] } == ["survives"])
        // A token logged out before the restart stays refused (same secret, so only the list refuses it).
        let (refused, error) = try await peer.http("GET", "/user/me", headers: loggedOut, body: nil)
        #expect(refused == 401 && error["code"] == "014")
    }
}
