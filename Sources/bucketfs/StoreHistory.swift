import BucketFS
import Foundation
import SyncStore

/// The `.history` view's source (`bucketfs mount --history`): versions the store has fetched,
/// rendered as the mount renders the entity, and fetches through the mount's live connection
/// (the same path `bucketfs history` takes through the control socket).
struct StoreHistory: MountHistory {
    let fetcher: HistoryFetcher
    /// How long a lookup or listing in the view waits for the server.
    let timeout: Duration

    private var store: SyncStore { fetcher.store }

    func keys(bucket: String) throws(FSError) -> [String] {
        try Self.mapped { () throws(StoreError) in try store.keysWithHistory(bucket: bucket) }
    }

    func versions(bucket: String, key: String) throws(FSError) -> [MountHistoryVersion] {
        try Self.mapped { () throws(StoreError) in
            try store.cachedVersions(bucket: bucket, key: key).compactMap { version in
                guard let data = version.data else { return nil }
                return MountHistoryVersion(
                    version: version.version, size: EntityHistory.rendered(data).utf8.count,
                    acceptedAt: version.acceptedAt.map { MountTime(($0.timeIntervalSince1970 * 1e9).rounded()) })
            }
        }
    }

    func content(bucket: String, key: String, version: Int) throws(FSError) -> [UInt8]? {
        let found = try Self.mapped { () throws(StoreError) in try store.cachedVersion(bucket: bucket, key: key, version: version) }
        return found?.data.map { Array(EntityHistory.rendered($0).utf8) }
    }

    func fetch(bucket: String, key: String, versions: [Int]?) async -> String? {
        do {
            _ = try await fetcher.fetchMissing(bucket: bucket, key: key, only: versions, timeout: timeout)
            return nil
        } catch {
            return "\(error)"
        }
    }

    private static func mapped<T>(_ body: () throws(StoreError) -> T) throws(FSError) -> T {
        do { return try body() } catch { throw FSError.io("\(error)") }
    }
}
