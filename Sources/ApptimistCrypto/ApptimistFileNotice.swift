import ApptimistProtocol
import Foundation

/// A file notice (Docs/apptimist-protocol.md, "File notices"): the data of a MESSAGE the bucketfs
/// service queues for a user, `from` its own key, after each WRITE or REMOVE of one of the user's
/// files by any connection. The seed has no listing; the queue, holding at most one notice per
/// file, is one. The data is this JSON document, sealed by the service to the user:
///
///     {"file": "<name, hex>", "op": "write", "size": 5, "sha512": "<128 hex>"}
///     {"file": "<name, hex>", "op": "remove"}
///
/// `file` is hex because file names are bytes; `size` and `sha512` are the contents' (write only).
public struct ApptimistFileNotice: Hashable, Sendable {
    public enum Operation: String, Sendable {
        case write
        case remove
    }

    public var file: [UInt8]
    public var operation: Operation
    /// The contents' length and SHA-512 (a write); nil for a removal.
    public var size: Int?
    public var sha512: [UInt8]?

    public init(file: [UInt8], operation: Operation, size: Int? = nil, sha512: [UInt8]? = nil) {
        self.file = file
        self.operation = operation
        self.size = size
        self.sha512 = sha512
    }

    /// The notice of `file` now holding `contents`.
    public static func written(_ file: [UInt8], contents: [UInt8]) throws(ApptimistCryptoError) -> ApptimistFileNotice {
        ApptimistFileNotice(file: file, operation: .write, size: contents.count, sha512: try SHA512.digest(contents))
    }

    public func json() -> [UInt8] {
        var object: [String: Any] = ["file": ApptimistHex.encode(file), "op": operation.rawValue]
        if let size { object["size"] = size }
        if let sha512 { object["sha512"] = ApptimistHex.encode(sha512) }
        return Array((try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data())
    }

    /// Reads the document; nil when it is not a file notice.
    public init?(json: [UInt8]) {
        guard let object = (try? JSONSerialization.jsonObject(with: Data(json))) as? [String: Any],
            let file = (object["file"] as? String).flatMap(ApptimistHex.decode), !file.isEmpty,
            let operation = (object["op"] as? String).flatMap(Operation.init(rawValue:))
        else { return nil }
        self.file = file
        self.operation = operation
        size = object["size"] as? Int
        sha512 = (object["sha512"] as? String).flatMap(ApptimistHex.decode)
        if operation == .write, sha512?.count != SHA512.digestLength { return nil }
    }
}
