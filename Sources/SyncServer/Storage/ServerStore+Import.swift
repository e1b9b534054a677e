import Foundation
import GRDB
import JSONDiff
import SyncProtocol

extension ServerStore {
    /// Creates `count` entities in a user's bucket straight in the database, `perTransaction` to
    /// a commit: each goes through `applyInTransaction` as a client's creating change would (version
    /// 1, kept version, change-log row, applied ccid, compaction), so a client's index or catch-up
    /// sees them exactly as if they had been saved, without a connection or a commit per change.
    /// For filling a server fast (`bucketfs seed`, the scale benchmark); run it while no server
    /// serves the directory. `entity(i)` gives the i-th key and object; an existing key fails.
    /// - Returns: the bucket's cv after the last one.
    public func importEntities(
        username: String, bucket name: String, count: Int, perTransaction: Int = 10_000,
        limits: (historyPerEntity: Int, changeLogRetention: Int) = (60, 10_000),
        entity: @Sendable (Int) -> (key: String, data: JSONObject),
        progress: @Sendable (Int) -> Void = { _ in }
    ) async throws -> String {
        guard let user = try await user(named: username) else { throw SyncServerError.unknownUser(username) }
        let bucket = try await openBucket(userID: user.id, name: name)
        let changeLimits = ChangeLimits(
            maxDocumentSize: .max, historyPerEntity: limits.historyPerEntity, changeLogRetention: limits.changeLogRetention)
        // ccids are 32 hex digits: this run's random half, then the entity's number.
        let run = String(UInt64.random(in: 0...UInt64.max), radix: 16)
        let prefix = String(repeating: "0", count: 16 - run.count) + run
        var done = 0
        var lastChange: StoredChange?
        while done < count {
            let range = done..<min(count, done + max(1, perTransaction))
            lastChange = try await pool.write { db in
                var last: StoredChange?
                var counters = try ChangeCounters(db)
                for index in range {
                    let (key, data) = entity(index)
                    let number = String(index, radix: 16)
                    let change = ChangeRequest(
                        id: key, operation: .modify, diff: data.mapValues { DiffOp.insert($0) },
                        ccid: prefix + String(repeating: "0", count: max(0, 16 - number.count)) + number)
                    switch try Self.applyInTransaction(
                        db, change, clientID: "bucketfs-import", bucket: bucket, limits: changeLimits, counters: &counters)
                    {
                    case .accepted(let stored): last = stored
                    case .refused(let code): throw SyncServerError.storage("entity \(key) refused with \(code.rawValue)")
                    }
                }
                try counters.write(db)
                return last
            }
            done = range.upperBound
            progress(done)
        }
        return lastChange.map { ChangeSequence.render($0, history: history.number) }
            ?? ChangeSequence.renderBase(0, storedTag: nil, bucketID: bucket.id, history: history.number)
    }
}
