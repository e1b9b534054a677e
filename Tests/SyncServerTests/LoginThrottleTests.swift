import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
@testable import SyncServer
import Testing

/// Issue 20: password guessing is braked per user and per address (429 with Retry-After), and
/// hashing does not starve the streaming connections.
@Suite(.timeLimit(.minutes(2)))
struct LoginThrottleTests {
    private func login(_ server: RunningServer, _ username: String, _ password: String) async throws -> HTTPResponse.Status {
        try await attempt(server, username, password).status
    }

    private func attempt(_ server: RunningServer, _ username: String, _ password: String) async throws -> (status: HTTPResponse.Status, retryAfter: String?) {
        let response = try await server.client.execute(
            uri: "/1/test-app/authorize/", method: .post,
            headers: [.contentType: "application/json", HTTPField.Name("X-Simperium-API-Key")!: "key"],
            body: ByteBuffer(string: #"{"username":"\#(username)","password":"\#(password)"}"#)
        )
        return (response.status, response.headers[.retryAfter])
    }

    @Test func guessingOneUserIsRefusedWithRetryAfterWhileAcksKeepComing() async throws {
        try await withServer(configure: {
            $0.loginLimitPerUser = LoginLimit(burst: 5, refill: .seconds(60))
            $0.loginLimitPerAddress = LoginLimit(burst: 1000, refill: .seconds(1))
        }) { server in
            let token = try await makeUser(server, "alice@example.com")
            _ = try await makeUser(server, "bob@example.com")
            let socket = try await server.socket()
            _ = try await socket.authorize(token: token)

            // Eight guessers at once, 4 guesses each, against alice; a writer syncs meanwhile.
            let statuses = try await withThrowingTaskGroup(of: [HTTPResponse.Status].self) { group in
                for guesser in 0..<8 {
                    group.addTask {
                        var seen: [HTTPResponse.Status] = []
                        for guess in 0..<4 { seen.append(try await login(server, "alice@example.com", "wrong-\(guesser)-\(guess)")) }
                        return seen
                    }
                }
                for index in 0..<20 {
                    let applied = try await create(socket, key: "k\(index)", object: ["n": .integer(Int64(index))])
                    #expect(applied.endVersion == 1)
                }
                var all: [HTTPResponse.Status] = []
                for try await seen in group { all += seen }
                return all
            }
            // Five wrong passwords were checked, every other guess refused before hashing.
            #expect(statuses.filter { $0 == .unauthorized }.count == 5)
            #expect(statuses.filter { $0 == .tooManyRequests }.count == 27)
            let refused = try await attempt(server, "alice@example.com", "secret-alice@example.com")
            #expect(refused.status == .tooManyRequests)
            #expect(Int(refused.retryAfter ?? "") ?? 0 >= 1)
            // Another user is not locked out by alice's guessers.
            #expect(try await login(server, "bob@example.com", "secret-bob@example.com") == .ok)
            #expect(try await socket.request("h:1") == "h:2")
            await socket.close()
        }
    }

    /// Issue 38: a guesser hammering a name does not lock its owner out. The owner's address
    /// (it has logged in as them before) keeps its own allowance; the guesser's, and any new
    /// one, share the braked per-user bucket; wrong passwords from the owner's address spend
    /// only that address's allowance.
    @Test func theOwnerLogsInFromTheirUsualAddressWhileAGuesserHammersTheName() async throws {
        try await withServer(configure: {
            $0.loginLimitPerUser = LoginLimit(burst: 3, refill: .seconds(600))
            $0.loginLimitPerAddress = LoginLimit(burst: 1000, refill: .seconds(1))
        }) { server in
            _ = try await makeUser(server, "alice@example.com")
            func login(_ password: String, from address: String) async throws -> Int {
                try await httpRequest(
                    port: server.port, "POST", "/1/test-app/authorize/",
                    extraHeader: "Content-Type: application/json\r\nX-Simperium-API-Key: key",
                    body: #"{"username":"alice@example.com","password":"\#(password)"}"#, from: address
                ).status
            }
            let owner = "127.0.0.2", guesser = "127.0.0.3", newcomer = "127.0.0.4"
            #expect(try await login("secret-alice@example.com", from: owner) == 200)

            var guesses: [Int] = []
            for index in 0..<10 { guesses.append(try await login("guess-\(index)", from: guesser)) }
            #expect(guesses == [401, 401, 401] + Array(repeating: 429, count: 7), "\(guesses)")
            // The shared bucket is empty: the right password from an unknown address waits too.
            #expect(try await login("secret-alice@example.com", from: newcomer) == 429)
            // The owner's address is not braked by the guesser...
            for _ in 0..<5 { #expect(try await login("secret-alice@example.com", from: owner) == 200) }
            // ...and its own wrong passwords spend only its own allowance.
            var typos: [Int] = []
            for index in 0..<4 { typos.append(try await login("typo-\(index)", from: owner)) }
            #expect(typos == [401, 401, 401, 429], "\(typos)")
            #expect(try await login("guess-more", from: guesser) == 429)
        }
    }

    /// Telepat's login (`/user/login_password`, as the SDK calls it, and `login-password`) is
    /// braked by the same throttle: guesses by either API count against one user, the answer is
    /// Telepat's 429 shape with Retry-After, and the owner's usual address still gets in.
    @Test func telepatLoginsShareTheThrottle() async throws {
        try await withServer(configure: {
            TelepatTests.configure(&$0)
            $0.loginLimitPerUser = LoginLimit(burst: 3, refill: .seconds(600))
            $0.loginLimitPerAddress = LoginLimit(burst: 1000, refill: .seconds(1))
        }) { server in
            _ = try await makeUser(server, "ann")
            let headers = TelepatTests.headers.map { "\($0.key): \($0.value)" }.joined(separator: "\r\n")
            func telepat(_ path: String, _ password: String, from address: String) async throws -> (status: Int, head: String, body: String) {
                try await httpExchange(
                    port: server.port, "POST", path, extraHeader: headers,
                    body: #"{"username":"ann","password":"\#(password)"}"#, from: address)
            }
            func simperium(_ password: String, from address: String) async throws -> Int {
                try await httpRequest(
                    port: server.port, "POST", "/1/test-app/authorize/",
                    extraHeader: "Content-Type: application/json\r\nX-Simperium-API-Key: key",
                    body: #"{"username":"ann","password":"\#(password)"}"#, from: address
                ).status
            }
            let owner = "127.0.0.2", guesser = "127.0.0.3"
            #expect(try await telepat("/user/login_password", "secret-ann", from: owner).status == 200)
            var guesses: [Int] = []
            for index in 0..<2 { guesses.append(try await telepat("/user/login_password", "guess-\(index)", from: guesser).status) }
            guesses.append(try await simperium("guess-2", from: guesser))
            let refused = try await telepat("/user/login-password", "guess-3", from: guesser)
            guesses.append(refused.status)
            #expect(guesses == [401, 401, 401, 429], "\(guesses)")
            #expect(refused.body.contains(#""code":"050""#), "\(refused.body)")
            #expect(refused.head.lowercased().contains("\r\nretry-after: "), "\(refused.head)")
            #expect(try await simperium("guess-4", from: guesser) == 429)
            // The owner's usual address is not braked by the guesser, by either API.
            #expect(try await telepat("/user/login_password", "secret-ann", from: owner).status == 200)
            #expect(try await simperium("secret-ann", from: owner) == 200)
        }
    }

    @Test func guessingManyUsersFromOneAddressIsRefused() async throws {
        try await withServer(configure: {
            $0.loginLimitPerUser = LoginLimit(burst: 100, refill: .seconds(60))
            $0.loginLimitPerAddress = LoginLimit(burst: 3, refill: .seconds(60))
        }) { server in
            var statuses: [HTTPResponse.Status] = []
            for index in 0..<6 { statuses.append(try await login(server, "user\(index)@example.com", "guess")) }
            #expect(statuses == [.unauthorized, .unauthorized, .unauthorized, .tooManyRequests, .tooManyRequests, .tooManyRequests])
        }
    }
}
