import ApptimistProtocol
import Foundation

/// A bounce (Docs/apptimist-protocol.md, "Across versions"): the data of a MESSAGE the bucketfs
/// service queues for a sender, `from` its own key, instead of delivering one of its messages
/// that cannot reach the recipient (a version 2 message to a user whose devices all speak
/// version 1). Sealed by the service to the sender, as a file notice is:
///
///     {"undelivered": "<message id, hex>", "to": "<recipient's key, hex>", "reason": "..."}
public struct ApptimistUndelivered: Hashable, Sendable {
    /// The id the sender computed for the message (the seed's).
    public var messageID: [UInt8]
    public var recipient: [UInt8]
    public var reason: String

    public init(messageID: [UInt8], recipient: [UInt8], reason: String) {
        self.messageID = messageID
        self.recipient = recipient
        self.reason = reason
    }

    public func json() -> [UInt8] {
        let object: [String: Any] = [
            "undelivered": ApptimistHex.encode(messageID), "to": ApptimistHex.encode(recipient), "reason": reason,
        ]
        return Array((try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data())
    }

    /// Reads the document; nil when it is not a bounce.
    public init?(json: [UInt8]) {
        guard let object = (try? JSONSerialization.jsonObject(with: Data(json))) as? [String: Any],
            let messageID = (object["undelivered"] as? String).flatMap(ApptimistHex.decode), messageID.count == 64,
            let recipient = (object["to"] as? String).flatMap(ApptimistHex.decode)
        else { return nil }
        self.messageID = messageID
        self.recipient = recipient
        reason = object["reason"] as? String ?? "not delivered"
    }
}
