import JSONDiff
import SyncStore

/// A server without versions (Telepat, Apptimist) in the store: each whole state of an entity
/// the engine sees from the server becomes the entity's next version, as a change from the last
/// one (the ghost). Local edits made meanwhile are rebased over it by the store, so both
/// survive; the server's last state wins per key. TelepatMirror keeps Telepat's objects by it.
public struct CountedVersionMirror: Sendable {
    public let store: SyncStore

    public init(store: SyncStore) {
        self.store = store
    }

    /// The server's whole state of `key` now (nothing when it is what the store has already).
    public func apply(state object: JSONObject, key: String, bucket: String) throws(StoreError) {
        try apply(key: key, bucket: bucket) { _ in object }
    }

    /// The server's state of `key` worked out by `next` from what the store last had from the
    /// server (its ghost; nil when it has none), as a patch is applied: nil changes nothing.
    public func apply(key: String, bucket: String, _ next: (JSONObject?) -> JSONObject?) throws(StoreError) {
        let entity = try store.entity(bucket: bucket, key: key)
        let ghost = entity?.version == nil ? nil : entity?.ghost
        guard let object = next(ghost) else { return }
        if let ghost, ghost == object { return }
        let version = (entity?.version ?? 0) + 1
        if entity != nil {
            // The whole new state, as a reload brings it: local edits are rebased over it, and an
            // entity waiting for a reload (a version missed) takes it too (no `e` to ask with).
            _ = try store.applyEntity(bucket: bucket, key: key, version: version, data: object)
            return
        }
        let diff = JSONDiffing.encode(JSONDiffing.diff(from: [:], to: object)).objectValue ?? [:]
        let change = RemoteChange(key: key, operation: .modify(diff: diff), sourceVersion: nil, endVersion: version, cv: nil, data: object)
        _ = try store.applyRemote(bucket: bucket, changes: [change])
    }

    /// The entity is gone from the server (nothing when the store never had it from there).
    public func remove(key: String, bucket: String) throws(StoreError) {
        guard let entity = try store.entity(bucket: bucket, key: key), let version = entity.version else { return }
        let change = RemoteChange(key: key, operation: .remove, sourceVersion: version, endVersion: version + 1, cv: nil)
        _ = try store.applyRemote(bucket: bucket, changes: [change])
    }

    /// The server took a local change: the store records it as the entity's next version. True
    /// when the store has a next change of it ready (an edit made meanwhile).
    @discardableResult
    public func acknowledge(_ change: OutgoingChange) throws(StoreError) -> Bool {
        let version = change.sourceVersion ?? 0
        let operation: RemoteChange.Operation
        switch change.operation {
        case .modify(let diff): operation = .modify(diff: diff)
        case .remove: operation = .remove
        }
        let remote = RemoteChange(
            key: change.key, operation: operation, sourceVersion: change.sourceVersion, endVersion: version + 1, cv: nil,
            ccids: [change.ccid])
        return !(try store.applyRemote(bucket: change.bucket, changes: [remote]).readyToSend.isEmpty)
    }

    /// The value a change sends: the entity as the server has it (its ghost) with the change's
    /// own diff (later edits ride on the next change). Nil for a removal.
    public func value(sentBy change: OutgoingChange) throws(StoreError) -> JSONObject? {
        guard case .modify(let diff) = change.operation else { return nil }
        let entity = try store.entity(bucket: change.bucket, key: change.key)
        let ghost = entity?.ghost ?? [:]
        return (try? JSONDiffing.apply(JSONDiffing.decode(.object(diff)), to: ghost)) ?? entity?.value
    }
}
