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

    func authorize(username: String, password: String) async throws -> String {
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
            throw CommandError("cannot reach the auth API at \(url): \(error.localizedDescription)")
        }
        let status = (response as? HTTPURLResponse)?.statusCode ?? 0
        let text = String(decoding: body, as: UTF8.self)
        guard status == 200 else {
            throw CommandError("login as \(username) failed (HTTP \(status)): \(text.prefix(200))")
        }
        guard let object = try? JSONSerialization.jsonObject(with: body) as? [String: Any],
              let token = object["access_token"] as? String else {
            throw CommandError("the auth API answered without an access_token")
        }
        return token
    }
}
