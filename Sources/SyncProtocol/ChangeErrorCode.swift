/// The error codes a server puts in a change error reply (spec "Error Responses").
public enum ChangeErrorCode: Int, Sendable, Hashable, CaseIterable, CustomStringConvertible {
    /// Invalid id or schema: the change did not have the required fields. Do not resend as is.
    case invalidRequest = 400
    /// No permission: get a new token, or the document is not accessible.
    case unauthorized = 401
    /// The object or version does not exist: resend with the full object (`d`).
    case notFound = 404
    /// Wrong or missing `sv`: reload the entity, or resend with the full object.
    case badVersion = 405
    /// Already applied: stop sending it and catch up with `cv`.
    case duplicate = 409
    /// The change changed nothing: drop it.
    case emptyChange = 412
    /// The document is too large.
    case documentTooLarge = 413
    /// The diff could not be applied: resend with the full object (`d`).
    case invalidDiff = 440
    /// Internal server error (any 5xx).
    case internalError = 500

    public var description: String {
        switch self {
        case .invalidRequest: return "400 invalid id or schema"
        case .unauthorized: return "401 invalid permission"
        case .notFound: return "404 object or version not found"
        case .badVersion: return "405 bad version"
        case .duplicate: return "409 duplicate change"
        case .emptyChange: return "412 empty change"
        case .documentTooLarge: return "413 document too large"
        case .invalidDiff: return "440 invalid diff"
        case .internalError: return "500 internal server error"
        }
    }

    /// The code for a wire value: exact matches, and any other 5xx as `internalError`.
    public init?(code: Int) {
        if let known = ChangeErrorCode(rawValue: code) {
            self = known
        } else if (500...599).contains(code) {
            self = .internalError
        } else {
            return nil
        }
    }
}
