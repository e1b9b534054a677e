import SyncEngine
import SyncStore

/// The mount's side of `bucketfs history`: fetches the versions the server keeps of an entity
/// through the mount's live connection into the store, where the command reads them (and
/// finds them again offline).
struct HistoryFetcher: Sendable {
    /// How many versions of an entity the server keeps (bucketfs's server: the last 60).
    static let keptVersions = 60

    /// The engine's capability of asking the server (Simperium's SyncClient).
    let client: any EntityVersionFetching
    let store: SyncStore

    func handle(_ request: ControlRequest) async -> ControlReply {
        await fetchHistory(bucket: request.bucket, key: request.key)
    }

    private func fetchHistory(bucket: String, key: String) async -> ControlReply {
        do {
            // Nothing of it ever reached the server (as far as this mount knows): nothing to ask.
            guard let (latest, fetched) = try await fetchMissing(bucket: bucket, key: key) else { return ControlReply() }
            return ControlReply(latestVersion: latest, notKept: fetched.filter { $0.data == nil }.map(\.version))
        } catch {
            return ControlReply(error: "\(error)")
        }
    }

    /// Fetches into the store the versions the server may keep (only `only` of them, when
    /// given) that it does not have yet; nil when the entity never reached the server. Throws
    /// when offline even if nothing of the whole range is missing (`bucketfs history` says
    /// what it could not ask), not when none of `only` is.
    func fetchMissing(
        bucket: String, key: String, only: [Int]? = nil, timeout: Duration = .seconds(15)
    ) async throws -> (latest: Int, fetched: [EntityVersion])? {
        guard let latest = try Self.latestVersion(store, bucket: bucket, key: key) else { return nil }
        let cached = Set(try store.cachedVersions(bucket: bucket, key: key).map(\.version))
        let wanted = only.map(Set.init)
        let missing = Self.window(upTo: latest).filter { !cached.contains($0) && wanted?.contains($0) != false }
        // Asked for versions the server cannot have, or has given already: nothing to ask.
        if only != nil, missing.isEmpty { return (latest, []) }
        let fetched = try await client.fetchVersions(bucket: bucket, key: key, versions: missing, timeout: timeout)
        try store.cacheVersions(bucket: bucket, key: key, fetched)
        return (latest, fetched)
    }

    /// The newest server version the store knows: the entity's, or for one it forgot (deleted
    /// here or on the server) the last it had.
    static func latestVersion(_ store: SyncStore, bucket: String, key: String) throws -> Int? {
        if let entity = try store.entity(bucket: bucket, key: key), let version = entity.version { return version }
        return try store.lastVersionBeforeRemoval(bucket: bucket, key: key)
    }

    /// The versions the server may still keep when `latest` is the newest.
    static func window(upTo latest: Int) -> ClosedRange<Int> {
        max(1, latest - keptVersions + 1)...max(1, latest)
    }
}
