import Crypto
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import JSONDiff
import TelepatProtocol

/// Why a Telepat API call did not succeed.
public enum TelepatCallError: Error, Sendable, CustomStringConvertible {
    /// The server answered with Telepat's error shape.
    case refused(TelepatErrorResponse)
    /// No usable answer: the network, a timeout, a body that is not Telepat's.
    case unreachable(String)

    var status: Int? {
        if case .refused(let error) = self { return error.status }
        return nil
    }

    public var description: String {
        switch self {
        case .refused(let error): return "the server refused: \(error)"
        case .unreachable(let reason): return "the server cannot be reached: \(reason)"
        }
    }
}

/// The API's HTTP side: Telepat's headers on every request, its answer and error shapes back.
struct TelepatHTTP: Sendable {
    let baseURL: String
    let appID: String
    /// Hex SHA-256 of the API key, the same for every request.
    let sign: String

    init(configuration: TelepatConfiguration) {
        baseURL = configuration.baseURL
        appID = configuration.appID
        sign = SHA256.hash(data: Array(configuration.apiKey.utf8)).map { String(format: "%02x", $0) }.joined()
    }

    /// Calls `path`; the answer's `content` on success.
    func call(
        _ path: String, method: String = "POST", body: JSONValue? = nil, device: String?, token: String?
    ) async throws(TelepatCallError) -> JSONValue {
        guard let url = URL(string: baseURL + path) else { throw .unreachable("bad URL \(baseURL + path)") }
        var request = URLRequest(url: url, timeoutInterval: 15)
        request.httpMethod = method
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        request.setValue(appID, forHTTPHeaderField: "X-BLGREQ-APPID")
        request.setValue(sign, forHTTPHeaderField: "X-BLGREQ-SIGN")
        request.setValue(device ?? "TP_EMPTY_UDID", forHTTPHeaderField: "X-BLGREQ-UDID")
        if let token { request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization") }
        if let body { request.httpBody = Data(body.compactRenderedBytes()) }
        let data: Data
        let response: URLResponse
        do {
            (data, response) = try await URLSession.shared.data(for: request)
        } catch {
            throw .unreachable("\(method) \(path): \(error.localizedDescription)")
        }
        let status = (response as? HTTPURLResponse)?.statusCode ?? 0
        if (200..<300).contains(status) {
            do { return try TelepatResponse(parsing: Array(data)).content } catch {
                throw .unreachable("\(method) \(path): an answer that is not Telepat's (\(error))")
            }
        }
        do { throw TelepatCallError.refused(try TelepatErrorResponse(parsing: Array(data))) } catch let error as TelepatCallError {
            throw error
        } catch {
            throw .refused(TelepatErrorResponse(status: status, code: "\(status)", message: String(decoding: data.prefix(200), as: UTF8.self)))
        }
    }
}

/// A JWT's expiry (`exp`, seconds since 1970), read without checking its signature (the server does).
enum JWTExpiry {
    static func of(_ token: String) -> Date? {
        claims(of: token)?["exp"]?.doubleValue.map { Date(timeIntervalSince1970: $0) }
    }

    /// When to renew `token`: `margin` before it expires, or halfway through its life when that
    /// is shorter than twice the margin (a server with short tokens); nil when it does not say
    /// when it expires.
    static func renewal(of token: String, margin: Duration) -> Date? {
        guard let claims = claims(of: token), let expires = claims["exp"]?.doubleValue else { return nil }
        var lead = Double(margin.components.seconds) + Double(margin.components.attoseconds) / 1e18
        if let issued = claims["iat"]?.doubleValue, expires > issued { lead = min(lead, (expires - issued) / 2) }
        return Date(timeIntervalSince1970: expires - lead)
    }

    private static func claims(of token: String) -> JSONValue? {
        let parts = token.split(separator: ".")
        guard parts.count == 3 else { return nil }
        var payload = parts[1].replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while payload.count % 4 != 0 { payload += "=" }
        guard let data = Data(base64Encoded: payload), let claims = try? JSONValue(parsing: Array(data)), claims.objectValue != nil else {
            return nil
        }
        return claims
    }
}
