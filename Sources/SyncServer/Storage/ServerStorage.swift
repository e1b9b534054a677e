import JSONDiff
import SyncProtocol

/// Accounts of a server's store: what the auth API and the operator's CLI (`bucketfs user`) do.
public protocol ServerAccounts: Sendable {
    /// Creates a user and returns a first access token. Throws `userExists` for a taken name.
    func createUser(username: String, password: String) async throws -> UserCredentials
    /// Checks a password and returns a new access token (older tokens stay valid).
    func authorize(username: String, password: String) async throws -> UserCredentials
    /// Issues a new access token for an existing user without a password.
    func issueToken(username: String) async throws -> UserCredentials
}

/// The seam between the server's streaming and auth code and its durable state: the SQLite
/// `ServerStore` (one node) and the PostgreSQL `PostgresServerStore` (several nodes on one
/// database) both sit behind it, and the code above cannot tell which one it talks to.
///
/// Ordering contract. Every store has one serial *delivery sequence* per node; what it hands
/// out runs there, one at a time, in this order:
/// - `submit`'s completion runs after the change is durable (or refused, or failed), in
///   submission order with the node's other completions and `submitInLine` actions; the
///   completion of an accepted change runs at its place in cv order, so a caller publishing
///   from it broadcasts changes in cv order and never before they are durable.
/// - Changes committed by another node sharing the database reach `deliverForeignChanges`'s
///   handler in the same sequence, at their place in cv order: each exactly once, none skipped.
/// - `readIndexPage` and `readChanges` hand their result to `deliver` in that sequence, after
///   the broadcasts of every change the result includes and before those of any later change
///   (a catch-up and the broadcasts around it neither overlap nor leave a gap;
///   `SubscriptionHub` relies on this to drop exactly the broadcasts a catch-up carries).
protocol ServerStorage: ServerAccounts {
    /// Changes waiting for the next group commit.
    var commitQueue: CommitQueue { get }

    /// The history the database serves, whose number every cv on the wire carries.
    var history: ServerHistory { get }

    /// Reads something cheap (`SELECT 1`); throws when the store cannot answer (`/readyz`).
    func checkReadable() async throws

    /// The user owning `token`, or nil when no such token exists.
    func user(forToken token: String) async throws -> AuthenticatedUser?

    /// The user named `username`, or nil when there is none.
    func user(named username: String) async throws -> AuthenticatedUser?

    /// The bucket `name` of a user, created on first use with the current cv as its base.
    func openBucket(userID: Int64, name: String) async throws -> BucketHandle

    /// Reads one index page and hands it to `deliver` in the delivery sequence.
    /// - Parameter maxDataBytes: a page with data ends early (with a mark) once its entities
    ///   reach this many bytes.
    func readIndexPage(
        bucket: BucketHandle, afterKey: String?, offset: Int, limit: Int, includeData: Bool, maxDataBytes: Int,
        deliver: @escaping @Sendable (IndexPage) -> Void
    ) async throws

    /// Reads every change after `cv` and hands the result to `deliver` in the delivery sequence.
    /// - Parameter maxDiffBytes: a catch-up whose diffs add up to more is answered as unknown.
    func readChanges(
        bucket: BucketHandle, since cv: String, maxDiffBytes: Int, deliver: @escaping @Sendable (CatchUp) -> Void
    ) async throws

    /// `key` at `version`, if that version is kept and is not a deletion: its data, and when
    /// the server accepted it (nil for versions kept from before it recorded that).
    func entityVersion(bucket: BucketHandle, key: String, version: Int) async throws -> KeptVersion?

    /// The current version and data of `key` (nil data: deleted), or nil when the bucket never
    /// had it. Read outside any commit: a change submitted after reading it may find a newer
    /// version (the resolver then rebases it, as for a client's stale `sv`).
    func entity(bucket: BucketHandle, key: String) async throws -> EntityState?

    /// Queues `change` for the next commit and returns at once (see the ordering contract).
    func submit(
        _ change: ChangeRequest, clientID: String, bucket: BucketHandle, limits: ChangeLimits,
        completion: @escaping @Sendable (Result<ChangeVerdict<StoredChange>, any Error>) -> Void
    )

    /// Runs `action` in the delivery sequence after every change submitted before it has completed.
    func submitInLine(_ action: @escaping @Sendable () -> Void)

    /// Drops all but the newest `keepingLast` changes of a user's bucket from the change log;
    /// clients behind the dropped ones get `cv:?`. Returns how many changes were dropped.
    @discardableResult
    func compactChangeLog(username: String, bucket name: String, keepingLast: Int) async throws -> Int

    /// Hands the changes other nodes commit to `publish` (see the ordering contract). A store
    /// that only one node uses never calls it.
    func deliverForeignChanges(to publish: @escaping @Sendable (_ bucketID: Int64, _ change: StoredChange) -> Void)

    /// Hands what the database connection does to `observer` (the metrics); a store without a
    /// database server (SQLite) has nothing to tell.
    func observeDatabase(_ observer: @escaping @Sendable (DatabaseEvent) -> Void)
}

/// What a store's database connection does, for the metrics (issue 38).
enum DatabaseEvent: Sendable {
    /// The LISTEN connection for other nodes' commits was lost (it is made again).
    case listenLost
    /// A statement got a pooled connection after waiting this long.
    case connectionWait(Duration)
}
