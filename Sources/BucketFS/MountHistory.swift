/// Earlier versions of entities, for the read-only view `.history/<bucket>/<key>/<version>.json`
/// (`bucketfs mount --history`). BucketFS knows no sync engine (DESIGN.md, "Seams"): the command
/// line gives one that reads the store's cache of fetched versions and fetches through the
/// mount's live connection.
///
/// Everything but `fetch` is local (the store); `fetch` is the only method that waits for the
/// network, and the file system calls it off its work queues, holding no lock.
public protocol MountHistory: Sendable {
    /// Keys of the bucket's entities that have server versions, deleted ones included; sorted.
    func keys(bucket: String) throws(FSError) -> [String]
    /// The versions of the entity fetched so far, oldest first.
    func versions(bucket: String, key: String) throws(FSError) -> [MountHistoryVersion]
    /// A fetched version's bytes, rendered as the mount renders the entity; nil if not fetched.
    func content(bucket: String, key: String, version: Int) throws(FSError) -> [UInt8]?
    /// Fetches into the store those of `versions` (nil: every version the server may keep) that
    /// are not there yet, bounded by a timeout. Returns why the server could not be asked (nil:
    /// it was, or nothing was missing); a version the server does not keep is simply not fetched.
    func fetch(bucket: String, key: String, versions: [Int]?) async -> String?
}

/// One fetched version, as its file shows it.
public struct MountHistoryVersion: Hashable, Sendable {
    public let version: Int
    /// Bytes of the rendered JSON.
    public let size: Int
    /// When the server accepted it; nil when the server did not say.
    public let acceptedAt: MountTime?

    public init(version: Int, size: Int, acceptedAt: MountTime?) {
        self.version = version
        self.size = size
        self.acceptedAt = acceptedAt
    }
}
