import Crypto
import Foundation
import JSONDiff

/// The JWT (HS256) a Telepat login answers with: who, and until when.
struct TelepatToken: Sendable, Hashable {
    var username: String
    var userID: Int64
    var publicID: String
    /// Unix seconds.
    var expires: Int64

    func signed(secret: [UInt8], issuedAt: Int64) -> String {
        let header = Self.base64URL(Array(#"{"alg":"HS256","typ":"JWT"}"#.utf8))
        // `jti`: each token is its own (two logins in one second would otherwise be one token,
        // and a logout of one would revoke both).
        let claims: JSONValue = .object([
            "username": .string(username), "uid": .integer(userID), "id": .string(publicID),
            "iat": .integer(issuedAt), "exp": .integer(expires), "jti": .string(UUID().uuidString.lowercased()),
        ])
        let input = header + "." + Self.base64URL(claims.compactRenderedBytes())
        return input + "." + Self.signature(input, secret: secret)
    }

    /// The token's claims, when its signature is right and it has not expired.
    static func verify(_ token: String, secret: [UInt8], now: Int64) -> TelepatToken? {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3 else { return nil }
        let input = parts[0] + "." + parts[1]
        guard constantTimeEqual(Array(signature(String(input), secret: secret).utf8), Array(parts[2].utf8)) else { return nil }
        guard let header = decode(parts[0]).flatMap({ try? JSONValue(parsing: $0) }), header["alg"] == .string("HS256"),
              let claims = decode(parts[1]).flatMap({ try? JSONValue(parsing: $0) }),
              case .string(let username)? = claims["username"], case .integer(let uid)? = claims["uid"],
              case .string(let publicID)? = claims["id"], case .integer(let expires)? = claims["exp"], expires > now
        else { return nil }
        return TelepatToken(username: username, userID: uid, publicID: publicID, expires: expires)
    }

    private static func signature(_ input: String, secret: [UInt8]) -> String {
        let mac = HMAC<SHA256>.authenticationCode(for: Array(input.utf8), using: SymmetricKey(data: secret))
        return base64URL(Array(mac))
    }

    static func base64URL(_ bytes: [UInt8]) -> String {
        Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    private static func decode(_ text: Substring) -> [UInt8]? {
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.count % 4 != 0 { base64 += "=" }
        return Data(base64Encoded: base64).map { Array($0) }
    }
}
