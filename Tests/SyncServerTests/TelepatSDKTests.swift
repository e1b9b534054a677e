import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import JSONDiff
import SyncProtocol
@testable import SyncServer
import TelepatProtocol
import Testing

/// What Telepat's JS SDK 0.4.8 speaks (issue 36): its socket starts with Engine.IO 3
/// long-polling and upgrades to a WebSocket (socket.io-client 1.x), it logs in at
/// `/user/login_password` and out with `GET /user/logout`, a filtered subscription is a channel
/// of its own, and it applies only `replace` patches.
@Suite(.timeLimit(.minutes(3)))
struct TelepatSDKTests {
    static let appID = TelepatTests.appID
    static var headers: [String: String] { TelepatTests.headers }

    /// HTTP on a connection of its own (a long poll waits on one while others go on).
    final class HTTP: Sendable {
        let client: TestClient

        init(port: Int) {
            client = TestClient(host: "127.0.0.1", port: port, configuration: .init(timeout: .seconds(60)))
            client.connect()
        }

        func request(_ method: HTTPRequest.Method, _ path: String, headers: [String: String] = [:], body: [UInt8]? = nil) async throws -> (Int, HTTPFields, [UInt8]) {
            var fields = HTTPFields()
            for (name, value) in headers { fields[HTTPField.Name(name)!] = value }
            let response = try await client.execute(TestClient.Request(path, method: method, headers: fields, body: body.map { ByteBuffer(bytes: $0) }))
            return (Int(response.status.code), response.headers, Array((response.body ?? ByteBuffer()).readableBytesView))
        }

        func api(_ method: HTTPRequest.Method, _ path: String, headers: [String: String], body: JSONValue?) async throws -> (Int, JSONValue) {
            let (status, _, bytes) = try await request(method, path, headers: headers, body: body?.compactRenderedBytes())
            return (status, try JSONValue(parsing: bytes))
        }

        func shutdown() async { try? await client.shutdown() }
    }

    /// A registered device and a logged-in user (`ann`); the headers of user routes.
    private func login(_ http: HTTP, user: String = "ann") async throws -> (device: String, headers: [String: String]) {
        let (_, registered) = try await http.api(.post, "/device/register", headers: Self.headers, body: .object(["info": .object(["os": "browser"])]))
        let device = try #require(registered["content"]?["identifier"]?.stringValue)
        let (status, login) = try await http.api(
            .post, "/user/login_password", headers: Self.headers, body: .object(["username": .string(user), "password": .string("secret-\(user)")]))
        #expect(status == 200)
        var headers = Self.headers
        headers["X-BLGREQ-UDID"] = device
        headers["Authorization"] = "Bearer " + (try #require(login["content"]?["token"]?.stringValue))
        return (device, headers)
    }

    // MARK: Engine.IO long-polling and the upgrade

    /// A text-framed (`b64=1`) payload read as engine.io-parser 1.x reads it: `<length>:` then
    /// that many characters, each a byte of the packet's UTF-8.
    private func textPackets(_ body: [UInt8]) throws -> [String] {
        let units = Array(String(decoding: body, as: UTF8.self).utf16)
        var packets: [String] = []
        var index = 0
        while index < units.count {
            guard let colon = units[index...].firstIndex(of: 0x3A),
                  let length = Int(String(decoding: units[index..<colon], as: UTF16.self)), length <= units.count - colon - 1
            else { throw TestFailure("not a text payload: \(String(decoding: body, as: UTF8.self))") }
            let characters = units[(colon + 1)..<(colon + 1 + length)]
            #expect(characters.allSatisfy { $0 < 0x100 }, "a packet's characters are its UTF-8 bytes")
            packets.append(String(decoding: characters.map { UInt8($0) }, as: UTF8.self))
            index = colon + 1 + length
        }
        return packets
    }

    private func textPayload(_ packets: [String]) -> [UInt8] {
        // ASCII packets only (what this test sends): the length is the character count.
        Array(packets.map { "\($0.utf8.count):\($0)" }.joined().utf8)
    }

    /// The whole life of a socket.io-client 1.x session, by hand over real HTTP and a real
    /// WebSocket: the handshake poll, the client's packets POSTed, long polls that wait for the
    /// server's, ping/pong, then the upgrade (`2probe` -> `3probe` while the waiting poll is cut
    /// short with a noop, `5`), after which the WebSocket carries the session and polling is over.
    @Test func aPollingSessionUpgradesToAWebSocketAsSocketIOClient1Does() async throws {
        // A long ping interval: this client polls by hand, and on a loaded machine the gap
        // between two of its polls once passed a short one's silence (the session was closed).
        let statistics = ServerStatistics()
        try await withServer(store: .sqlite, configure: {
            TelepatTests.configure(&$0, pingInterval: .seconds(60))
            $0.statistics = statistics
        }) { server in
            _ = try await makeUser(server, "ann")
            let http = HTTP(port: server.port)
            let poller = HTTP(port: server.port)
            defer { Task { await http.shutdown(); await poller.shutdown() } }
            let (device, headers) = try await login(http)

            // The handshake: open (offering the websocket upgrade) and the Socket.IO connect.
            let (status, fields, body) = try await poller.request(.get, "/socket.io/?EIO=3&transport=polling&t=Lx1a2b3&b64=1")
            #expect(status == 200 && fields[.contentType]?.hasPrefix("text/plain") == true)
            let opening = try textPackets(body)
            #expect(opening.count == 2 && opening.last == "40", "\(opening)")
            guard case .open(let handshake) = try EngineIOPacket.parse(opening[0]) else { throw TestFailure("no open packet: \(opening)") }
            #expect(handshake.upgrades == ["websocket"] && handshake.pingInterval == 60000 && handshake.pingTimeout == 60000)
            let sid = handshake.sessionID
            let polling = "/socket.io/?EIO=3&transport=polling&b64=1&sid=\(sid)"

            // The client's packets come by POST; the server's answers wait for the next poll.
            let bind = TelepatSocketEvent.bindDevice(deviceID: device, applicationID: Self.appID).frame
            let (posted, _, ok) = try await http.request(.post, polling, headers: ["Content-Type": "text/plain;charset=UTF-8"], body: textPayload([bind, "2"]))
            #expect(posted == 200 && ok == Array("ok".utf8))
            var answered: [String] = []
            while answered.count < 2 {
                let (_, _, bytes) = try await poller.request(.get, polling + "&t=p1")
                answered += try textPackets(bytes).filter { $0 != "6" }
            }
            #expect(answered == [TelepatSocketEvent.ready.frame, "3"])

            // A notification while polling, its text UTF-8 twice (engine.io-parser 1.x).
            let channel: JSONValue = .object(["context": "c1", "model": "task"])
            let (subscribed, _) = try await http.api(.post, "/object/subscribe", headers: headers, body: .object(["channel": channel]))
            #expect(subscribed == 200)
            _ = try await http.api(.post, "/object/create", headers: headers, body: .object([
                "context": "c1", "model": "task", "content": .object(["title": "é😀 polled"]),
            ]))
            var polled: [String] = []
            while polled.isEmpty {
                let (_, _, bytes) = try await poller.request(.get, polling + "&t=p2")
                polled = try textPackets(bytes).filter { $0 != "6" }
            }
            guard case .message(let notification) = try TelepatSocketEvent.parse(frame: polled[0]) else { throw TestFailure("\(polled)") }
            #expect(notification.new.first?.object?["title"] == "é😀 polled")

            // A poll waits; the probe of a WebSocket with the sid cuts it short with a noop.
            let waiting = Task { try await poller.request(.get, polling + "&t=p3") }
            let socket = try await TestSocket.connect(port: server.port, appID: "", path: "/socket.io/?EIO=3&transport=websocket&sid=\(sid)")
            defer { Task { await socket.close() } }
            #expect(try await socket.request("2probe") == "3probe")
            let (cutStatus, _, cut) = try await waiting.value
            let cutPackets = try textPackets(cut)
            #expect(cutStatus == 200 && cutPackets == ["6"])
            socket.send("5")

            // The WebSocket carries the session now: notifications, pongs; polling is over.
            _ = try await http.api(.post, "/object/create", headers: headers, body: .object([
                "context": "c1", "model": "task", "content": .object(["title": "over the socket"]),
            ]))
            guard case .message(let upgraded) = try TelepatSocketEvent.parse(frame: try await socket.receive()) else { throw TestFailure("no message") }
            #expect(upgraded.new.first?.object?["title"] == "over the socket")
            #expect(try await socket.request("2") == "3")
            let (after, _, refusal) = try await poller.request(.get, polling + "&t=p4")
            let refusalJSON = try JSONValue(parsing: refusal)
            #expect(after == 400 && refusalJSON["code"] == .integer(3))
            // An unknown session: engine.io's error.
            let (unknown, _, error) = try await poller.request(.get, "/socket.io/?EIO=3&transport=polling&b64=1&sid=nope")
            let errorJSON = try JSONValue(parsing: error)
            #expect(unknown == 400 && errorJSON == .object(["code": .integer(1), "message": "Session ID unknown"]))
            // Both creates are counted in the metrics as Telepat changes (issue 38).
            #expect(statistics.prometheusText().contains(#"bucketfs_changes_accepted_total{protocol="telepat"} 2"#))
        }
    }

    /// An independent client (python-engineio 3.14 under python-socketio 4.6) with the SDK's
    /// transports: it long-polls (the binary framing, no `b64`) and upgrades to the WebSocket,
    /// and one that only polls is served whole over polling, non-ASCII text included.
    @Test func anIndependentClientPollsThenUpgradesOrKeepsPolling() async throws {
        try await withServer(store: .sqlite, configure: TelepatTests.configure) { server in
            _ = try await makeUser(server, "ann")
            let http = HTTP(port: server.port)
            defer { Task { await http.shutdown() } }
            let channel: JSONValue = .object(["context": "c1", "model": "task"])
            for transports in [["polling", "websocket"], ["polling"]] {
                let (device, headers) = try await login(http)
                let peer = try TelepatPeer(port: server.port)
                defer { Task { await peer.close() } }
                let connected = try await peer.connect(device: device, application: Self.appID, transports: transports)
                #expect(connected["ready"] == .bool(true) && connected["transport"] == .string(transports.last!), "\(connected)")
                _ = try await http.api(.post, "/object/subscribe", headers: headers, body: .object(["channel": channel]))
                let title = "\(transports.joined(separator: "+")) ünïcödé 😀"
                _ = try await http.api(.post, "/object/create", headers: headers, body: .object([
                    "context": "c1", "model": "task", "content": .object(["title": .string(title)]),
                ]))
                let message = try #require(try await peer.nextMessage())
                #expect(message["data"]?["new"]?.arrayValue?.first?["object"]?["title"] == .string(title))
                await peer.close()
            }
        }
    }

    // MARK: The SDK's HTTP calls

    /// `user.login()` posts to `/user/login_password`; `user.logout()` GETs `/user/logout`,
    /// which revokes the token (POST still does).
    @Test func loginWithAnUnderscoreAndLogoutByGET() async throws {
        try await withServer(store: .sqlite, configure: TelepatTests.configure) { server in
            _ = try await makeUser(server, "ann")
            let http = HTTP(port: server.port)
            defer { Task { await http.shutdown() } }
            for method in [HTTPRequest.Method.get, .post] {
                let (_, headers) = try await login(http)
                let (me, user) = try await http.api(.get, "/user/me", headers: headers, body: nil)
                #expect(me == 200 && user["content"]?["username"] == "ann")
                let (out, answer) = try await http.api(method, "/user/logout", headers: headers, body: nil)
                #expect(out == 200 && answer["content"] == "Logged out", "\(method)")
                let (refused, error) = try await http.api(.get, "/user/me", headers: headers, body: nil)
                #expect(refused == 401 && error["code"] == "014", "\(method): \(error)")
            }
            let (wrong, error) = try await http.api(.post, "/user/login_password", headers: Self.headers, body: .object(["username": "ann", "password": "no"]))
            #expect(wrong == 401 && error["code"] == "023")
        }
    }

    /// A known route asked with another method, and the user-data routes bucketfs does not
    /// serve: Telepat's error shape, never a bare 404.
    @Test func wrongMethodsAndUnservedRoutesGetTelepatsErrorShape() async throws {
        try await withServer(store: .sqlite, configure: TelepatTests.configure) { server in
            _ = try await makeUser(server, "ann")
            let http = HTTP(port: server.port)
            defer { Task { await http.shutdown() } }
            let (_, headers) = try await login(http)
            let cases: [(HTTPRequest.Method, String, JSONValue?, Int, String)] = [
                (.get, "/object/create", nil, 404, "002"),
                (.put, "/object/subscribe", .object([:]), 404, "002"),
                (.get, "/user/login_password", nil, 404, "002"),
                (.delete, "/device/register", nil, 404, "002"),
                (.get, "/user/get?user_id=someone", nil, 501, "045"),
                (.post, "/user/update", .object(["patches": .array([])]), 501, "045"),
            ]
            for (method, path, body, status, code) in cases {
                let (answered, error) = try await http.api(method, path, headers: headers, body: body)
                #expect(answered == status && error["status"] == .integer(Int64(status)) && error["code"] == .string(code), "\(method) \(path): \(error)")
                #expect(error["message"]?.stringValue?.isEmpty == false)
            }
        }
    }

    // MARK: The socket's bind

    /// `bind_device` of an id `/device/register` never gave: an `error` event in Telepat's shape,
    /// no `ready`; the registered id is then bound.
    @Test func anUnregisteredDeviceIsNotBound() async throws {
        try await withServer(store: .sqlite, configure: TelepatTests.configure) { server in
            _ = try await makeUser(server, "ann")
            let http = HTTP(port: server.port)
            defer { Task { await http.shutdown() } }
            let (device, _) = try await login(http)
            let peer = try TelepatPeer(port: server.port)
            defer { Task { await peer.close() } }
            let refused = try await peer.connect(device: "never-registered", application: Self.appID, transports: ["polling", "websocket"])
            #expect(refused["ready"] == nil)
            #expect(refused["refused"]?["code"] == "025" && refused["refused"]?["status"] == .integer(404), "\(refused)")
            await peer.close()
            let again = try TelepatPeer(port: server.port)
            defer { Task { await again.close() } }
            #expect(try await again.connect(device: device, application: Self.appID)["ready"] == .bool(true))
        }
    }

    // MARK: Channels and patches

    /// The SDK's key of a channel (telepat-js `subscriptionKeyForOptions`), computed here apart
    /// from the server's code: base64 (Foundation's) of the filters as `JSON.stringify` wrote them.
    private func sdkKey(_ filters: String? = nil) -> String {
        "blg:\(Self.appID):context:c1:task" + (filters.map { ":filter:" + Data($0.utf8).base64EncodedString() } ?? "")
    }

    /// One device holds the plain channel and a filtered one at once: each notification names
    /// the channel it is for (an object in both: both keys); unsubscribing the filtered channel
    /// leaves the plain one, and the other way round.
    @Test func aPlainAndAFilteredChannelAreHeldAtOnceEachUnderItsOwnKey() async throws {
        try await withServer(store: .sqlite, configure: TelepatTests.configure) { server in
            _ = try await makeUser(server, "ann")
            let http = HTTP(port: server.port)
            defer { Task { await http.shutdown() } }
            let (device, headers) = try await login(http)
            let peer = try TelepatPeer(port: server.port)
            defer { Task { await peer.close() } }
            try await peer.connect(device: device, application: Self.appID, transports: ["polling", "websocket"])
            // The filters as the SDK sends them: `JSON.stringify` of the developer's object.
            let filters = #"{"and":[{"is":{"status":"open"}},{"range":{"priority":{"lte":3,"gte":1}}}]}"#
            let plain = #"{"channel":{"context":"c1","model":"task"}}"#
            let filtered = #"{"channel":{"context":"c1","model":"task"},"filters":"# + filters + "}"
            for body in [plain, filtered] {
                let (status, _) = try await peer.http("POST", "/object/subscribe", headers: headers, body: .string(body))
                #expect(status == 200)
            }
            func create(_ title: String, _ status: String, _ priority: Int64) async throws {
                let (created, _) = try await http.api(.post, "/object/create", headers: headers, body: .object([
                    "context": "c1", "model": "task", "content": .object(["title": .string(title), "status": .string(status), "priority": .integer(priority)]),
                ]))
                #expect(created == 202)
            }
            /// Title -> the keys it was notified under, over the next notifications.
            func notified(_ count: Int) async throws -> [String: Set<String>] {
                var keys: [String: Set<String>] = [:]
                var entries = 0
                while entries < count {
                    let message = try #require(try await peer.nextMessage())
                    for entry in message["data"]?["new"]?.arrayValue ?? [] {
                        let title = try #require(entry["object"]?["title"]?.stringValue)
                        keys[title, default: []].formUnion((entry["subscriptions"]?.arrayValue ?? []).compactMap(\.stringValue))
                        entries += 1
                    }
                }
                return keys
            }
            try await create("both", "open", 2)
            try await create("plain only", "done", 2)
            #expect(try await notified(3) == ["both": [sdkKey(), sdkKey(filters)], "plain only": [sdkKey()]])

            // Leaving the filtered channel leaves the plain one as it was.
            let (left, _) = try await peer.http("POST", "/object/unsubscribe", headers: headers, body: .string(filtered))
            #expect(left == 200)
            try await create("after leaving", "open", 1)
            #expect(try await notified(1) == ["after leaving": [sdkKey()]])

            // And the other way round: only the filtered channel then.
            _ = try await peer.http("POST", "/object/subscribe", headers: headers, body: .string(filtered))
            _ = try await peer.http("POST", "/object/unsubscribe", headers: headers, body: .string(plain))
            try await create("filtered only", "open", 3)
            try await create("nobody's", "done", 3)
            #expect(try await notified(1) == ["filtered only": [sdkKey(filters)]])
            #expect(try await peer.quiet(seconds: 0.5).isEmpty)
        }
    }

    /// A key removed through Simperium reaches Telepat subscribers as a `replace` with `null`
    /// (the SDK applies nothing else), never as `remove`.
    @Test func aRemovedKeyReachesTelepatAsReplaceWithNull() async throws {
        try await withServer(store: .sqlite, configure: TelepatTests.configure) { server in
            _ = try await makeUser(server, "ann")
            let application = try #require(TelepatTests.settings.applications[Self.appID])
            _ = try await TelepatOwners.ensure(application, store: server.store)
            let simperium = try await server.socket()
            defer { Task { await simperium.close() } }
            _ = try await simperium.authorize(token: try await server.store.issueToken(username: application.owner).accessToken, bucket: "c1.task")
            let http = HTTP(port: server.port)
            defer { Task { await http.shutdown() } }
            let (device, headers) = try await login(http)
            let peer = try TelepatPeer(port: server.port)
            defer { Task { await peer.close() } }
            try await peer.connect(device: device, application: Self.appID, transports: ["polling", "websocket"])
            _ = try await http.api(.post, "/object/subscribe", headers: headers, body: .object(["channel": .object(["context": "c1", "model": "task"])]))
            let object: JSONObject = ["title": "note", "tags": .array(["a"]), "done": .bool(false)]
            _ = try await create(simperium, key: "n1", object: object)
            #expect(try await peer.nextMessage()?["data"]?["new"]?.arrayValue?.first?["object"]?["id"] == "n1")

            var edited = object
            edited["tags"] = nil
            edited["title"] = "renamed"
            let diff = JSONDiffing.encode(JSONDiffing.diff(from: object, to: edited)).compactRendered()
            #expect(diff.contains(#""o":"-""#), "the Simperium change removes a key: \(diff)")
            _ = try appliedChange(try ServerMessage.parse(try await simperium.request(changeFrame(key: "n1", diff: diff, sv: 1, ccid: newCCID()))))
            let updated = try #require(try await peer.nextMessage()?["data"]?["updated"]?.arrayValue)
            let patches = updated.compactMap { $0["patch"] }
            #expect(Set(patches) == [
                .object(["op": "replace", "path": "task/n1/tags", "value": .null]),
                .object(["op": "replace", "path": "task/n1/title", "value": "renamed"]),
            ])
            #expect(updated.allSatisfy { $0["subscriptions"] == .array([.string(sdkKey())]) })
        }
    }
}
