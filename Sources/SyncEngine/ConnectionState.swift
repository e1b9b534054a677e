import Foundation

/// What the connection is doing, for `bucketfs status` and the file system.
public enum ConnectionState: Sendable, Hashable {
    /// Not started, or stopped.
    case stopped
    /// Opening the WebSocket (attempt counts from 1 after the last success).
    case connecting(attempt: Int)
    /// The WebSocket is open.
    case connected
    /// No connection since `since`; the next attempt is at `retryAt`.
    case offline(since: Date, retryAt: Date?, reason: String)
}

/// The server the client connects to (or last tried), of the configured ones.
public struct ServerInUse: Sendable, Hashable, CustomStringConvertible {
    /// Its base URL, as configured.
    public let url: String
    /// Its place in the configured order, from 1.
    public let position: Int
    /// How many servers are configured.
    public let count: Int

    public init(url: String, position: Int, count: Int) {
        self.url = url
        self.position = position
        self.count = count
    }

    /// `ws://b:4000 (2 of 2)`; just the URL when it is the only one.
    public var description: String { count > 1 ? "\(url) (\(position) of \(count))" : url }
}

/// First-sync progress of one bucket: entities stored / entities the index announced so far.
public struct SyncProgress: Sendable, Hashable {
    public let bucket: String
    public let entitiesDone: Int
    public let entitiesKnown: Int
    /// Bytes of index pages and entities received so far.
    public let bytesReceived: Int
    /// True once the whole index is loaded and the bucket is in sync.
    public let isReady: Bool

    public init(bucket: String, entitiesDone: Int, entitiesKnown: Int, bytesReceived: Int, isReady: Bool) {
        self.bucket = bucket
        self.entitiesDone = entitiesDone
        self.entitiesKnown = entitiesKnown
        self.bytesReceived = bytesReceived
        self.isReady = isReady
    }
}
