/// What fsync waits for when the mount is asked to (`bucketfs mount --fsync-waits-for-server`):
/// the server's acknowledgement of every change made so far to a file, or to all files of a
/// bucket for fsync of its directory. BucketFS knows no sync engine (DESIGN.md, "Seams"); the
/// command line gives one that asks the engine and the store.
public protocol ServerAcknowledgement: Sendable {
    /// Waits until the server has acknowledged every change to `key` of `bucket` (every key of
    /// the bucket when nil) made before the call, for at most `timeout` seconds.
    func waitForServer(bucket: String, key: String?, timeout: Double) async -> ServerAcknowledgementOutcome
}

public enum ServerAcknowledgementOutcome: Sendable, Hashable {
    case acknowledged
    /// Not connected when asked: fsync fails at once (the change stays queued).
    case offline(reason: String)
    /// The server will not have it as it is (invalid JSON, a refused change).
    case notSendable(reason: String)
    case timedOut
}
