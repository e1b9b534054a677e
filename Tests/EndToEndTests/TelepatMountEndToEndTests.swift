import Foundation
import PostgresTestSupport
import Testing

/// Telepat mounts (`--protocol telepat`) against the real `bucketfs serve --telepat`: two
/// mounts of two users of one application, each with its own store and device, see each other's
/// creates, updates and deletes (an application's objects are shared by its users); immutable
/// fields are refused locally; offline saves and kill -9 lose nothing.
@Suite(.serialized, .timeLimit(.minutes(Patience.testMinutes)))
struct TelepatMountEndToEndTests {
    static let appID = "tp-app"
    static let apiKey = "tp-secret"

    /// `bucketfs serve --telepat` with application `tp-app`, context `Tasks` (id `c1`) holding
    /// models `task` and `note`, owned by `team@example.com` (its Simperium account holds the
    /// objects), and the users `alice@example.com` and `bob@example.com`, logged in through the
    /// Telepat API. Every account is made with `bucketfs user add`.
    struct TelepatServer {
        static let owner = "team@example.com"
        static let users = ["alice@example.com", "bob@example.com"]
        static let password = "correct horse battery"
        let process: Background
        let port: Int
        /// Each user's Telepat JWT, by username.
        let tokens: [String: String]
        /// The owner's Simperium token (`bucketfs user add`); nil when the server was started again.
        let simperiumToken: String?
        var url: String { "http://127.0.0.1:\(port)" }

        static func start(in sandbox: Sandbox, port: Int = 0, data: String? = nil) throws -> TelepatServer {
            var simperiumToken: String?
            if data == nil {
                for username in [owner] + users {
                    let added = try sandbox.bucketfs(["user", "add", "--data", sandbox.directory("server"), username], input: password + "\n")
                    guard added.status == 0 else { throw SandboxError("bucketfs user add failed: \(added.stderr)") }
                    if username == owner { simperiumToken = added.stdout.split(separator: "\n").last.map(String.init) }
                }
            }
            let data = try data ?? sandbox.directory("server")
            let settings = sandbox.root + "/telepat.json"
            try Data("""
                {"applications": [{"id": "\(appID)", "api_key": "\(apiKey)", "owner": "\(owner)",
                  "contexts": [{"id": "c1", "name": "Tasks", "models": ["task", "note"]}]}],
                 "jwt_secret": "an end-to-end test's fixed secret, 32+ bytes long"}
                """.utf8).write(to: URL(fileURLWithPath: settings))
            let process = try sandbox.start(["serve", "--data", data, "--port", "\(port)", "--telepat", settings], log: "server-\(UUID().uuidString.prefix(4)).log")
            var found: Int?
            _ = eventually {
                found = ServerProcess.port(in: process.log)
                return found != nil || !process.isRunning
            }
            guard let found else { throw SandboxError("bucketfs serve --telepat printed no port:\n\(process.logTail)") }
            let base = "http://127.0.0.1:\(found)"
            var tokens: [String: String] = [:]
            for username in users {
                let login = try call(base, "/user/login-password", ["username": username, "password": password])
                guard let content = login["content"] as? [String: Any], let token = content["token"] as? String else {
                    throw SandboxError("login answered no token: \(login)")
                }
                tokens[username] = token
            }
            return TelepatServer(process: process, port: found, tokens: tokens, simperiumToken: simperiumToken)
        }

        /// A Telepat API call as any client makes it (plain HTTP, Telepat's headers).
        static func call(_ base: String, _ path: String, _ body: [String: Any], token: String? = nil) throws -> [String: Any] {
            let digest = try Command.run(
                "/usr/bin/env", ["python3", "-c", "import hashlib, sys; print(hashlib.sha256(sys.argv[1].encode()).hexdigest())", apiKey])
            let sign = digest.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            var arguments = [
                "-s", "-X", "POST", base + path, "-H", "Content-Type: application/json", "-H", "X-BLGREQ-APPID: \(appID)",
                "-H", "X-BLGREQ-SIGN: \(sign)", "-H", "X-BLGREQ-UDID: TP_EMPTY_UDID",
                "--data-binary", String(decoding: try JSONSerialization.data(withJSONObject: body), as: UTF8.self),
            ]
            if let token { arguments += ["-H", "Authorization: Bearer \(token)"] }
            let answer = try Command.run("/usr/bin/curl", arguments)
            return (try? JSONSerialization.jsonObject(with: Data(answer.stdout.utf8)) as? [String: Any]) ?? [:]
        }
    }

    /// A Telepat mount logged in as `user` (alice unless named).
    func mount(
        _ sandbox: Sandbox, _ name: String, _ server: TelepatServer, as user: String = TelepatServer.users[0], buckets: [String] = ["Tasks/task"]
    ) throws -> MountProcess {
        var arguments = [
            "--protocol", "telepat", "--server", server.url, "--app-id", Self.appID, "--api-key", Self.apiKey,
            "--token", server.tokens[user] ?? "", "--store", sandbox.root + "/\(name).sqlite",
        ]
        for bucket in buckets { arguments += ["--bucket", bucket] }
        return try MountProcess(sandbox, at: name, arguments: arguments)
    }

    func objects(_ mount: MountProcess) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: mount.path("Tasks/task"))) ?? []).sorted()
    }

    func object(_ mount: MountProcess, _ file: String) throws -> [String: Any] {
        let data = try Data(contentsOf: URL(fileURLWithPath: mount.path("Tasks/task/" + file)))
        return try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
    }

    /// Rewrites an object file with `edit` applied (pretty, sorted: as the mount renders it).
    func edit(_ mount: MountProcess, _ file: String, _ edit: (inout [String: Any]) -> Void) throws {
        var value = try object(mount, file)
        edit(&value)
        let data = try JSONSerialization.data(withJSONObject: value, options: [.prettyPrinted, .sortedKeys])
        try Files.write(mount.path("Tasks/task/" + file), String(decoding: data, as: UTF8.self) + "\n")
    }

    @Test func createsUpdatesDeletesAndRefusedEditsBetweenTwoTelepatMounts() async throws {
        let sandbox = try Sandbox()
        defer { sandbox.close() }
        let server = try TelepatServer.start(in: sandbox)
        let a = try mount(sandbox, "a", server)
        let b = try mount(sandbox, "b", server, as: TelepatServer.users[1])
        #expect(try FileManager.default.contentsOfDirectory(atPath: a.mountPoint) == ["Tasks"])

        // A new file is a create: it comes back as <id>.json, the name given goes away.
        try Files.write(a.path("Tasks/task/new.json"), "{\"title\": \"buy milk\", \"done\": false}")
        #expect(await waitUntil { objects(a).count == 1 && !objects(a).contains("new.json") })
        let file = try #require(objects(a).first)
        let created = try object(a, file)
        #expect(created["title"] as? String == "buy milk")
        #expect(file == "\(created["id"] as? String ?? "?").json")
        #expect(created["type"] as? String == "task" && created["context_id"] as? String == "c1")
        #expect(await waitUntil { objects(b) == [file] })

        // An edit in b: replace and remove reach a.
        try edit(b, file) { value in
            value["done"] = true
            value["title"] = nil
        }
        #expect(await waitUntil { (try? object(a, file)).map { $0["done"] as? Bool == true && $0["title"] == nil } == true })
        // An editor's save (a new file renamed over the object's) is an update of that object.
        try Command.shell("sed -i 's/\"done\": true/\"done\": \"yes\"/' Tasks/task/\(file)", in: a.mountPoint)
        #expect(await waitUntil { (try? object(b, file))?["done"] as? String == "yes" })
        #expect(objects(a) == [file])

        // An immutable field edited in a: refused, nothing sent, the bytes kept, status says why.
        try edit(a, file) { value in
            value["created"] = 1
            value["note"] = "sent with a bad created"
        }
        let kept = try Files.read(a.path("Tasks/task/" + file))
        #expect(await waitUntil {
            (try? sandbox.bucketfs(["status", a.mountPoint]).stdout.contains("rejected:400: `created` cannot be changed")) == true
        })
        #expect(try Files.read(a.path("Tasks/task/" + file)) == kept)
        try await Task.sleep(for: .seconds(1))
        #expect(try object(b, file)["note"] == nil)

        // A delete in b: the object leaves a's directory (a's refused edit of it is kept).
        try Files.write(b.path("Tasks/task/second.json"), "{\"title\": \"second\"}")
        // (b's own file has taken its id first: until then, rm would remove the local name.)
        #expect(await waitUntil { objects(a).count == 2 && objects(b).count == 2 && !objects(b).contains("second.json") })
        let second = try #require(objects(b).first { $0 != file })
        try Command.shell("rm Tasks/task/\(second)", in: b.mountPoint)
        #expect(await waitUntil { objects(a) == [file] })
    }

    @Test func offlineSavesAndKillNineReachTheServerWhenItIsBack() async throws {
        let sandbox = try Sandbox()
        defer { sandbox.close() }
        var server = try TelepatServer.start(in: sandbox)
        let a = try mount(sandbox, "a", server)
        let b = try mount(sandbox, "b", server, as: TelepatServer.users[1])
        try Files.write(a.path("Tasks/task/first.json"), "{\"title\": \"first\"}")
        #expect(await waitUntil { objects(b).count == 1 && objects(a).count == 1 && !objects(a).contains("first.json") })
        let file = try #require(objects(a).first)

        // The server goes away; a edits, creates, and is killed; b removes nothing meanwhile.
        server.process.signal(SIGTERM)
        #expect(await offThePool { server.process.waitForExit() })
        try edit(a, file) { $0["title"] = "edited offline" }
        try Files.write(a.path("Tasks/task/offline.json"), "{\"title\": \"made offline\"}")
        a.process.signal(SIGKILL)
        #expect(await offThePool { a.process.waitForExit() })
        try a.remount()
        #expect(try object(a, file)["title"] as? String == "edited offline")

        // Back on the same port and data: a sends both; b sees them (its reconnect subscribes anew).
        server = try TelepatServer.start(in: sandbox, port: server.port, data: sandbox.root + "/server")
        #expect(await waitUntil { objects(b).count == 2 })
        #expect(await waitUntil { (try? object(b, file)["title"] as? String) == "edited offline" })
        #expect(await waitUntil { !objects(a).contains("offline.json") && objects(a).count == 2 })

        // b unmounted (its store keeps both), a deletes one: b mounted again subscribes anew,
        // and the object removed meanwhile leaves b's directory.
        #expect(try b.unmount())
        try Command.shell("rm Tasks/task/\(file)", in: a.mountPoint)
        #expect(await waitUntil { (try? sandbox.bucketfs(["status", a.mountPoint]).stdout.contains("0 saves waiting")) == true })
        try b.remount()
        #expect(await waitUntil { objects(b).count == 1 && !objects(b).contains(file) })
    }

    /// A server that forgot its devices (restored, or on PostgreSQL, where they live in memory)
    /// refuses a mount's `bind_device`: the mount registers its device again and its socket
    /// brings changes made elsewhere once more (issue 36).
    @Test func aServerThatForgotTheDevicesHasTheMountsRegisterAgain() async throws {
        let sandbox = try Sandbox()
        defer { sandbox.close() }
        var server = try TelepatServer.start(in: sandbox)
        let a = try mount(sandbox, "a", server)
        let b = try mount(sandbox, "b", server, as: TelepatServer.users[1])
        try Files.write(a.path("Tasks/task/first.json"), "{\"title\": \"first\"}")
        #expect(await waitUntil { objects(b).count == 1 && objects(a).count == 1 && !objects(a).contains("first.json") })
        let file = try #require(objects(a).first)

        server.process.signal(SIGTERM)
        #expect(await offThePool { server.process.waitForExit() })
        let devices = sandbox.root + "/server/telepat-devices.json"
        #expect(FileManager.default.fileExists(atPath: devices))
        try FileManager.default.removeItem(atPath: devices)
        server = try TelepatServer.start(in: sandbox, port: server.port, data: sandbox.root + "/server")

        // Edits after the restart reach the other mount only through a socket bound again.
        try edit(a, file) { $0["title"] = "after the restart" }
        #expect(await waitUntil { (try? object(b, file)["title"] as? String) == "after the restart" }, "\(b.process.logTail)")
        try edit(b, file) { $0["title"] = "and back" }
        #expect(await waitUntil { (try? object(a, file)["title"] as? String) == "and back" }, "\(a.process.logTail)")
    }

    @Test func aTelepatMountAndASimperiumMountOfTheSameDataSeeEachOther() async throws {
        let sandbox = try Sandbox()
        defer { sandbox.close() }
        let server = try TelepatServer.start(in: sandbox)
        let telepat = try mount(sandbox, "t", server)
        // The owner's Simperium bucket of context c1, model task: the same objects, as entities.
        let simperium = try MountProcess(sandbox, at: "s", arguments: [
            "--server", "ws://127.0.0.1:\(server.port)", "--app-id", Self.appID, "--token", try #require(server.simperiumToken),
            "--bucket", "c1.task", "--store", sandbox.root + "/s.sqlite",
        ])
        try Files.write(telepat.path("Tasks/task/new.json"), "{\"title\": \"from telepat\"}")
        #expect(await waitUntil { objects(telepat).count == 1 && !objects(telepat).contains("new.json") })
        let file = try #require(objects(telepat).first)
        let entity = simperium.path("c1.task/" + file)
        #expect(await waitUntil { (try? Files.read(entity))??.contains("\"title\": \"from telepat\"") == true })

        // A Simperium save (a jsondiff change) reaches the Telepat mount as an update.
        let data = try #require(try Files.read(entity))
        try Files.write(entity, data.replacingOccurrences(of: "from telepat", with: "from simperium"))
        #expect(await waitUntil { (try? object(telepat, file))?["title"] as? String == "from simperium" })
        // And a removal there removes the object here.
        try Command.shell("rm c1.task/\(file)", in: simperium.mountPoint)
        #expect(await waitUntil { objects(telepat).isEmpty })
    }
}
