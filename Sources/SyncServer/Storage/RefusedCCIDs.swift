import Crypto
import Foundation
import GRDB
import JSONDiff
import SQLiteStatements
import SyncProtocol

/// Refused changes, remembered by clientid+ccid so that the same request sent again gets the
/// same answer (issue 13: node-simperium resent a delete refused with 404 after the entity was
/// re-created in between, and deleted it). Kept as long as applied ccids (`compact`).
enum RefusedCCIDs {
    /// The code a request identical to `change` was refused with, if it was.
    static func code(_ db: Database, _ change: ChangeRequest, clientID: String, bucketID: Int64) throws -> ChangeErrorCode? {
        let row = try Row.fetchOne(
            db.cachedStatement(sql: "SELECT fingerprint, code FROM refused_ccids WHERE bucket_id = ? AND client_id = ? AND ccid = ?")
                .bound(bucketID, clientID, change.ccid)
        )
        guard let row else { return nil }
        let fingerprint: Data = row["fingerprint"]
        guard fingerprint == Self.fingerprint(change) else { return nil }
        return ChangeErrorCode(rawValue: row["code"])
    }

    /// Records a refusal, inside the batch's transaction, at the server's last change version
    /// (its `ChangeCounters`: compaction prunes it with the changes of that time).
    static func remember(
        _ db: Database, _ change: ChangeRequest, clientID: String, bucketID: Int64, code: ChangeErrorCode, lastChangeVersion: Int64
    ) throws {
        guard isRemembered(code) else { return }
        try db.cachedStatement(sql: """
            INSERT OR REPLACE INTO refused_ccids (bucket_id, client_id, ccid, cv, fingerprint, code)
            VALUES (?, ?, ?, ?, ?, ?)
            """).execute(binding: bucketID, clientID, change.ccid, lastChangeVersion, fingerprint(change), code.rawValue)
    }

    /// 409 is already remembered as the application; 5xx is a failure worth a retry.
    static func isRemembered(_ code: ChangeErrorCode) -> Bool {
        code != .duplicate && code != .internalError
    }

    /// What makes two requests with one ccid the same request: everything but the ids.
    static func fingerprint(_ change: ChangeRequest) -> Data {
        var text = "\(change.id)\u{0}\(change.operation.rawValue)\u{0}\(change.sourceVersion.map(String.init) ?? "-")\u{0}"
        text += change.diff.map { JSONDiffing.encode($0).compactRendered() } ?? "-"
        text += "\u{0}" + (change.data.map { JSONValue.object($0).compactRendered() } ?? "-")
        return Data(SHA256.hash(data: Data(text.utf8)))
    }
}
