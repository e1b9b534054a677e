import JSONDiff

/// A success answer: `{"status": 200 or 202, "content": ...}`.
public struct TelepatResponse: Hashable, Sendable {
    public var status: Int
    public var content: JSONValue

    public init(status: Int = 200, content: JSONValue) {
        self.status = status
        self.content = content
    }

    public init(parsing body: some Collection<UInt8>) throws(TelepatProtocolError) {
        let fields = try TelepatFields(parseTelepatJSON(body), field: "body")
        guard let status = try fields.optionalInt64("status") else { throw .missingField("status") }
        guard (200..<300).contains(status) else { throw .invalidValue(field: "status", value: "\(status) is not a success") }
        self.init(status: Int(status), content: fields.object[JSONKey("content")] ?? .null)
    }

    public var json: JSONValue { .object(["status": .integer(Int64(status)), "content": content]) }
}

/// An error answer: `{"status", "code": "<3 digits>", "message"}`, sent with `status` as the
/// HTTP status too.
public struct TelepatErrorResponse: Error, Hashable, Sendable, CustomStringConvertible {
    public var status: Int
    public var code: String
    public var message: String

    public init(status: Int, code: String, message: String) {
        self.status = status
        self.code = code
        self.message = message
    }

    public init(_ code: TelepatErrorCode, _ message: String) {
        self.init(status: code.status, code: code.rawValue, message: message)
    }

    public init(parsing body: some Collection<UInt8>) throws(TelepatProtocolError) {
        let fields = try TelepatFields(parseTelepatJSON(body), field: "body")
        guard let status = try fields.optionalInt64("status") else { throw .missingField("status") }
        guard (400..<600).contains(status) else { throw .invalidValue(field: "status", value: "\(status) is not an error") }
        self.init(status: Int(status), code: try fields.string("code"), message: try fields.optionalString("message") ?? "")
    }

    public var json: JSONValue {
        .object(["status": .integer(Int64(status)), "code": .string(code), "message": .string(message)])
    }

    public var description: String { "\(status) [\(code)] \(message)" }

    /// A malformed body's answer: 400 with the parser's reason.
    public static func malformed(_ error: TelepatProtocolError) -> TelepatErrorResponse {
        TelepatErrorResponse(.invalidRequest, "Malformed request: \(error)")
    }
}

/// The error codes bucketfs answers with, each with its HTTP status (Telepat's 3-digit string codes).
public enum TelepatErrorCode: String, Hashable, Sendable, CaseIterable {
    case serverFailure = "001"
    case unknownRoute = "002"
    case invalidRequest = "004"
    case invalidApplication = "006"
    case invalidAPIKey = "007"
    case deviceIDMissing = "008"
    case authorizationMissing = "013"
    case invalidToken = "014"
    case wrongCredentials = "023"
    case deviceNotFound = "025"
    case userExists = "029"
    case unknownContext = "033"
    case objectNotFound = "034"
    case unknownModel = "035"
    case immutableField = "038"
    case invalidPatch = "048"
    case objectTooLarge = "049"
    case tooManyRequests = "050"
    /// A route Telepat has and bucketfs does not serve (telepat-api's ServerNotConfigured code).
    case notServed = "045"

    public var status: Int {
        switch self {
        case .serverFailure: return 500
        case .unknownRoute, .objectNotFound, .unknownContext, .unknownModel, .deviceNotFound: return 404
        case .invalidRequest, .immutableField, .invalidPatch: return 400
        case .invalidApplication, .invalidAPIKey, .deviceIDMissing, .authorizationMissing, .invalidToken, .wrongCredentials:
            return 401
        case .userExists: return 409
        case .objectTooLarge: return 413
        case .tooManyRequests: return 429
        case .notServed: return 501
        }
    }
}
