import Foundation
import JSONDiff
import SyncEngine
import SyncProtocol
import SyncStore

extension SyncClient: EntityVersionFetching {
    /// Simperium keeps versions: `bucketfs history` and the `.history` view fetch them here.
    public nonisolated var versionHistory: (any EntityVersionFetching)? { self }

    /// Asks the server for kept versions of an entity (`e:key.version`, as `bucketfs history`
    /// does) on the bucket's live channel. The replies are history: the store is not changed.
    /// - Throws: `serverUnavailable` when offline, when the bucket is not in sync yet, or when
    ///   the answers do not all come within `timeout`.
    public func fetchVersions(
        bucket: String, key: String, versions: [Int], timeout: Duration = .seconds(15)
    ) async throws(SyncClientError) -> [EntityVersion] {
        guard let channel = channelsByBucket[bucket] else { throw .unknownBucket(bucket) }
        guard liveChannel(of: bucket) != nil else {
            throw .serverUnavailable(connection == nil ? "not connected" : "bucket \(bucket) is not in sync yet")
        }
        let wanted = Set(versions.filter { $0 > 0 })
        if wanted.isEmpty { return [] }
        let (answers, sink) = AsyncStream<Result<[EntityVersion], SyncClientError>>.makeStream()
        // Counted before anything is written: a reply may come as soon as the first request is out.
        let id = versionFetches.begin(channel: channel, key: key, versions: wanted, deliver: sink)
        for version in wanted.sorted() {
            await write(ChannelClientMessage.entity(key: key, version: version).frameText(channel: channel))
        }
        let timer = Task { [weak self] in
            try? await Task.sleep(for: timeout)
            await self?.versionFetchTimedOut(id)
        }
        defer { timer.cancel() }
        for await answer in answers { return try answer.get() }
        throw .stopped
    }

    private func versionFetchTimedOut(_ id: Int) {
        versionFetches.fail(id, .serverUnavailable("no answer from the server in time"))
    }
}

/// Fetches of kept versions in flight on the current connection. An `e` reply names no
/// request, so replies are counted per `key.version`: as many as history asked for are history
/// (one that timed out is still swallowed when it comes); any other is a reload's. Whichever
/// request a reply answers, a version's data is the same.
struct VersionFetches {
    private struct Fetch {
        let channel: Int
        let key: String
        var remaining: Set<Int>
        var results: [EntityVersion] = []
        let deliver: AsyncStream<Result<[EntityVersion], SyncClientError>>.Continuation
    }

    private var fetches: [Int: Fetch] = [:]
    private var nextID = 0
    /// Replies still owed to history, by `channel:key.version`.
    private var owed: [String: Int] = [:]

    private static func id(channel: Int, key: String, version: Int) -> String { "\(channel):\(key).\(version)" }

    mutating func begin(
        channel: Int, key: String, versions: Set<Int>, deliver: AsyncStream<Result<[EntityVersion], SyncClientError>>.Continuation
    ) -> Int {
        nextID += 1
        fetches[nextID] = Fetch(channel: channel, key: key, remaining: versions, deliver: deliver)
        for version in versions { owed[Self.id(channel: channel, key: key, version: version), default: 0] += 1 }
        return nextID
    }

    /// Takes an `e` reply if history is owed it; false leaves it to the reload path.
    mutating func received(channel: Int, key: String, version: Int, reply: EntityReply) -> Bool {
        let replyID = Self.id(channel: channel, key: key, version: version)
        guard let count = owed[replyID] else { return false }
        owed[replyID] = count > 1 ? count - 1 : nil
        let waiting = fetches.keys.sorted().first { id in
            guard let fetch = fetches[id] else { return false }
            return fetch.channel == channel && fetch.key == key && fetch.remaining.contains(version)
        }
        guard let waiting, var fetch = fetches[waiting] else { return true }
        fetch.remaining.remove(version)
        switch reply {
        case .data(let data, let acceptedAt, _):
            fetch.results.append(
                EntityVersion(version: version, data: data, acceptedAt: acceptedAt.map(Date.init(timeIntervalSince1970:))))
        case .unknown:
            fetch.results.append(EntityVersion(version: version, data: nil, acceptedAt: nil))
        }
        if fetch.remaining.isEmpty {
            fetches[waiting] = nil
            fetch.deliver.yield(.success(fetch.results.sorted { $0.version < $1.version }))
            fetch.deliver.finish()
        } else {
            fetches[waiting] = fetch
        }
        return true
    }

    mutating func fail(_ id: Int, _ error: SyncClientError) {
        guard let fetch = fetches.removeValue(forKey: id) else { return }
        fetch.deliver.yield(.failure(error))
        fetch.deliver.finish()
    }

    /// The connection closed: no reply is coming.
    mutating func connectionEnded() {
        for id in Array(fetches.keys) { fail(id, .serverUnavailable("the connection closed")) }
        owed.removeAll()
    }
}
