import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

import SyncProtocol

/// The Simperium auth API (`POST /1/{app_id}/authorize/`), used by `--user` to get a token; it
/// is at `authURL` when given, else where `AuthEndpoint` finds it from the streaming server.
struct AuthAPI {
    let serverURL: String
    let authURL: String?
    let appID: String
    let apiKey: String

    var httpBase: String { AuthEndpoint.base(streamingServer: serverURL, authURL: authURL) }

    /// The longest `Retry-After` worth waiting for at a prompt; past it, the user is told when to try.
    static let longestWait = 30

    /// Logs in; a 429 (too many attempts: the server's brake on password guessing) is waited out
    /// once when the server asks for at most `longestWait` seconds, saying so on standard error.
    func authorize(username: String, password: String) async throws -> String {
        var waited = false
        while true {
            switch try await attempt(username: username, password: password) {
            case .token(let token):
                return token
            case .retryAfter(let seconds) where !waited && seconds <= Self.longestWait:
                FileHandle.standardError.write(
                    Data("bucketfs: the auth API asks to wait \(seconds) s (too many login attempts for \(username)); waiting\n".utf8))
                try await Task.sleep(for: .seconds(seconds))
                waited = true
            case .retryAfter(let seconds):
                throw CommandError("login as \(username) refused for now: too many attempts; try again in \(seconds) s")
            }
        }
    }

    /// No answer from the auth API at all (the next server's may answer).
    struct Unreachable: Error, CustomStringConvertible {
        let description: String
    }

    /// Logs in through the first auth API that answers, in the order of `servers`: the nodes of
    /// one cluster share their accounts, so the token it gives serves them all. A refusal is
    /// final; only an auth API that does not answer is passed over.
    static func authorize(
        servers: [String], authURL: String?, appID: String, apiKey: String, username: String, password: String
    ) async throws -> String {
        var unreachable: [String] = []
        var tried: Set<String> = []
        for server in servers {
            let api = AuthAPI(serverURL: server, authURL: authURL, appID: appID, apiKey: apiKey)
            guard tried.insert(api.httpBase).inserted else { continue }
            do {
                return try await api.authorize(username: username, password: password)
            } catch let error as Unreachable {
                unreachable.append(error.description)
            }
        }
        throw CommandError(unreachable.joined(separator: "; "))
    }

    private enum Attempt {
        case token(String)
        case retryAfter(Int)
    }

    private func attempt(username: String, password: String) async throws -> Attempt {
        guard let url = URL(string: AuthEndpoint.authorizeURL(base: httpBase, appID: appID)) else {
            throw CommandError("invalid auth URL \(httpBase)")
        }
        var request = URLRequest(url: url)
        request.httpMethod = "POST"
        request.setValue(apiKey, forHTTPHeaderField: "X-Simperium-API-Key")
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        request.httpBody = try JSONSerialization.data(withJSONObject: ["username": username, "password": password])
        let (body, response): (Data, URLResponse)
        do {
            (body, response) = try await URLSession.shared.data(for: request)
        } catch {
            throw Unreachable(description: "cannot reach the auth API at \(url): \(error.localizedDescription)")
        }
        let status = (response as? HTTPURLResponse)?.statusCode ?? 0
        let text = String(decoding: body, as: UTF8.self)
        if status == 429 {
            let header = (response as? HTTPURLResponse)?.value(forHTTPHeaderField: "Retry-After")
            return .retryAfter(max(1, header.flatMap { Int($0.trimmingCharacters(in: .whitespaces)) } ?? 1))
        }
        guard status == 200 else {
            throw CommandError("login as \(username) failed (HTTP \(status)): \(text.prefix(200))")
        }
        guard let object = try? JSONSerialization.jsonObject(with: body) as? [String: Any],
              let token = object["access_token"] as? String else {
            throw CommandError("the auth API answered without an access_token")
        }
        return .token(token)
    }
}
