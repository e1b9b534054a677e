import Foundation
import JSONDiff

/// A JWT got once, outside any mount: `bucketfs login --protocol telepat` saves it for a remote,
/// as it saves a Simperium token; mounts of the remote use it (and renew it while they run).
public enum TelepatLogin {
    /// Logs `username` in through `/user/login-password` (no device yet: a mount registers its own).
    public static func token(
        serverURL: String, appID: String, apiKey: String, username: String, password: String
    ) async throws(TelepatCallError) -> String {
        let configuration = TelepatConfiguration(
            serverURL: serverURL, appID: appID, apiKey: apiKey, login: .password(username: username, password: password), buckets: [])
        let body: JSONValue = ["username": .string(username), "password": .string(password)]
        let answer = try await TelepatHTTP(configuration: configuration).call("/user/login-password", body: body, device: nil, token: nil)
        guard let token = answer["token"]?.stringValue else { throw .unreachable("the login answered no token") }
        return token
    }

    /// When `token` expires, from its claims; nil when it does not say.
    public static func expiry(of token: String) -> Date? { JWTExpiry.of(token) }
}
