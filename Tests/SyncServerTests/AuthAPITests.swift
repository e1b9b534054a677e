import Foundation
import GRDB
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import JSONDiff
import NIOCore
@testable import SyncServer
import Testing

@Suite(.timeLimit(.minutes(2)))
struct AuthAPITests {
    private static let apiKey = HTTPField.Name("X-Simperium-API-Key")!

    private func post(
        _ server: RunningServer, _ path: String, body: String, apiKey: String? = "key"
    ) async throws -> (status: HTTPResponse.Status, body: String) {
        var headers: HTTPFields = [.contentType: "application/json"]
        if let apiKey { headers[Self.apiKey] = apiKey }
        let response = try await server.client.execute(
            uri: path, method: .post, headers: headers, body: ByteBuffer(string: body)
        )
        return (response.status, String(buffer: response.body))
    }

    private func credentials(_ body: String) throws -> (username: String, token: String, userID: String) {
        let json = try JSONValue(parsing: body)
        return (
            try #require(json["username"]?.stringValue),
            try #require(json["access_token"]?.stringValue),
            try #require(json["userid"]?.stringValue)
        )
    }

    @Test(arguments: StoreKind.allCases) func createThenAuthorizeIssuesWorkingTokens(store: StoreKind) async throws {
        try await withServer(store: store) { server in
            let created = try await post(server, "/1/test-app/create/", body: #"{"username":"ann@example.com","password":"pw1"}"#)
            #expect(created.status == .ok)
            let first = try credentials(created.body)
            #expect(first.username == "ann@example.com")
            #expect(first.token.count == 32)
            #expect(first.token.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber) })
            #expect(first.userID.count == 32)

            let authorized = try await post(server, "/1/test-app/authorize/", body: #"{"username":"ann@example.com","password":"pw1"}"#)
            #expect(authorized.status == .ok)
            let second = try credentials(authorized.body)
            #expect(second.token != first.token)
            #expect(second.userID == first.userID)

            // Both tokens authorize a channel; the reply is the username.
            for token in [first.token, second.token] {
                let socket = try await server.socket()
                #expect(try await socket.authorize(token: token) == "ann@example.com")
                await socket.close()
            }
        }
    }

    @Test func tokensAreStoredOnlyAsDigests() async throws {
        try await withServer { server in
            let created = try await post(server, "/1/test-app/create", body: #"{"username":"dig","password":"pw"}"#)
            let token = try credentials(created.body).token
            let stored = try await server.sqliteStore.pool.read { db in
                try Data.fetchAll(db, sql: "SELECT token_hash FROM tokens")
            }
            #expect(stored.count == 1)
            #expect(stored.first.map(Array.init) == TokenGenerator.digest(token))
            for suffix in ["", "-wal"] {
                let raw = (try? Data(contentsOf: URL(fileURLWithPath: server.sqliteStore.databasePath + suffix))) ?? Data()
                #expect(raw.range(of: Data(token.utf8)) == nil)
            }
        }
    }

    @Test(arguments: StoreKind.allCases) func errorsArePlainTextWithStatus(store: StoreKind) async throws {
        try await withServer(store: store) { server in
            _ = try await post(server, "/1/test-app/create/", body: #"{"username":"bo","password":"right"}"#)

            let duplicate = try await post(server, "/1/test-app/create/", body: #"{"username":"bo","password":"x"}"#)
            #expect(duplicate.status == .conflict)
            #expect(duplicate.body.contains("exists"))

            let wrongPassword = try await post(server, "/1/test-app/authorize/", body: #"{"username":"bo","password":"wrong"}"#)
            #expect(wrongPassword.status == .unauthorized)
            let unknownUser = try await post(server, "/1/test-app/authorize/", body: #"{"username":"nobody","password":"wrong"}"#)
            #expect(unknownUser.status == .unauthorized)
            #expect(unknownUser.body == wrongPassword.body)

            let noKey = try await post(server, "/1/test-app/authorize/", body: #"{"username":"bo","password":"right"}"#, apiKey: nil)
            #expect(noKey.status == .forbidden)

            for body in ["not json", "[1,2]", #"{"username":"bo"}"#, #"{"username":1,"password":"x"}"#] {
                let bad = try await post(server, "/1/test-app/create/", body: body)
                #expect(bad.status == .badRequest, "body \(body)")
                #expect(JSONValueOrNil(bad.body) == nil, "errors are plain text")
            }
            let tooBig = try await post(server, "/1/test-app/create/", body: String(repeating: "x", count: 100_000))
            #expect(tooBig.status == .contentTooLarge)
        }
    }

    @Test(arguments: StoreKind.allCases) func usernamesThatParseAsJSONAreRefused(store: StoreKind) async throws {
        try await withServer(store: store) { server in
            for name in ["123", "true", "null", "\\\"quoted\\\"", "{}", "[]", "-1.5e3", " padded", ""] {
                let reply = try await post(server, "/1/test-app/create/", body: #"{"username":"\#(name)","password":"pw"}"#)
                #expect(reply.status == .badRequest, "username \(name)")
            }
            let ok = try await post(server, "/1/test-app/create/", body: #"{"username":"123abc","password":"pw"}"#)
            #expect(ok.status == .ok)
        }
    }

    @Test(arguments: StoreKind.allCases) func configuredAppIDAndAPIKeyAreEnforced(store: StoreKind) async throws {
        try await withServer(store: store, configure: {
            $0.appIDs = ["only-app"]
            $0.apiKeyCheck = { app, key in app == "only-app" && key == "sesame" }
        }) { server in
            let wrongApp = try await post(server, "/1/other-app/create/", body: #"{"username":"u","password":"p"}"#, apiKey: "sesame")
            #expect(wrongApp.status == .notFound)
            let wrongKey = try await post(server, "/1/only-app/create/", body: #"{"username":"u","password":"p"}"#, apiKey: "nope")
            #expect(wrongKey.status == .forbidden)
            let ok = try await post(server, "/1/only-app/create/", body: #"{"username":"u","password":"p"}"#, apiKey: "sesame")
            #expect(ok.status == .ok)
            // The streaming endpoint refuses other app ids too.
            await #expect(throws: (any Error).self) { _ = try await server.socket(appID: "other-app") }
        }
    }

    @Test func defaultPasswordCostIsAtLeast100kRounds() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let store = try ServerStore(directory: directory.path)
        _ = try await store.createUser(username: "slow", password: "pw")
        let iterations = try await store.pool.read { db in
            try Int.fetchOne(db, sql: "SELECT password_iterations FROM users WHERE username = 'slow'")
        }
        #expect((iterations ?? 0) >= 100_000)
        #expect(try await store.authorize(username: "slow", password: "pw").username == "slow")
        await #expect(throws: SyncServerError.wrongPassword) { try await store.authorize(username: "slow", password: "no") }
    }
}

private func JSONValueOrNil(_ text: String) -> JSONValue? {
    try? JSONValue(parsing: text)
}
