import JSONDiff
import SyncEngine
import SyncStore
import TelepatProtocol

/// Telepat's objects in the store. Telepat keeps no versions, so the store's versions of a
/// Telepat bucket are the engine's own count of server states per object: each server state the
/// engine sees becomes the next version, as a change from the last one (the ghost). Local edits
/// made meanwhile are rebased over it by the store, so both survive; per key the server's last
/// write wins, as on Telepat.
struct TelepatMirror: Sendable {
    let store: SyncStore
    private let counted: CountedVersionMirror

    init(store: SyncStore) {
        self.store = store
        counted = CountedVersionMirror(store: store)
    }

    /// The server's object as it is now (subscribe answer, `new` notification).
    func apply(object: JSONObject, bucket: String) throws(StoreError) {
        guard let id = object["id"]?.stringValue else { return }
        try counted.apply(state: object, key: id, bucket: bucket)
    }

    /// An `updated` patch: the known object with it applied, by its meaning (`increment` adds,
    /// `append` appends; see `TelepatObject.applying`).
    func apply(patch: TelepatPatch, bucket: String) throws(StoreError) {
        try counted.apply(key: patch.path.id, bucket: bucket) { ghost in
            // A patch of an object this mount never saw: nothing to patch; a fresh subscribe brings it.
            guard let ghost else { return nil }
            // A key set to null: Telepat 0.4 has no property removal, so a removal (in another
            // mount, through Simperium) arrives as `replace` with null (issue 36). The mount
            // shows it removed, as it was where it was made, and a mount's own removal, echoed
            // back, does not come back as `"key": null` in the file that dropped it.
            if patch.operation == .replace, patch.value == nil || patch.value == .null {
                var object = ghost
                object[JSONKey(patch.path.key)] = nil
                return object
            }
            // One the object cannot take (an increment of text): the server's object differs
            // from what this mount knows; the next subscribe brings it whole.
            return try? TelepatObject.applying(patch, to: ghost)
        }
    }

    /// The object is gone from the server.
    func remove(key: String, bucket: String) throws(StoreError) {
        try counted.remove(key: key, bucket: bucket)
    }

    /// A fresh subscribe's answer: every object applied, and every object the store had from the
    /// server that is not among them removed (it was deleted while this mount was offline).
    func reconcile(objects: [JSONObject], bucket: String) throws(StoreError) {
        var present = Set<String>()
        for object in objects {
            guard let id = object["id"]?.stringValue else { continue }
            present.insert(id)
            try apply(object: object, bucket: bucket)
        }
        for item in try store.localIndex(bucket: bucket).index where !present.contains(item.key) {
            try remove(key: item.key, bucket: bucket)
        }
    }

    /// The server took a local change (its 202): the store records it as the entity's next
    /// version. True when the store has a next change of it ready (an edit made meanwhile).
    @discardableResult
    func acknowledge(_ change: OutgoingChange) throws(StoreError) -> Bool {
        try counted.acknowledge(change)
    }

    /// A created object arrived under its server id: it takes the local file's place (the
    /// local name, acknowledged, goes away; the object shows as `<id>.json`).
    func adopt(created change: OutgoingChange, object: JSONObject) throws(StoreError) {
        try acknowledge(change)
        try apply(object: object, bucket: change.bucket)
        let removal = RemoteChange(key: change.key, operation: .remove, sourceVersion: 1, endVersion: 2, cv: nil)
        _ = try store.applyRemote(bucket: change.bucket, changes: [removal])
    }
}

/// What a save asks of the server, decided from the store's change and the entity.
enum TelepatSave: Equatable {
    /// `/object/create` of the local file's object.
    case create(content: JSONObject)
    /// `/object/update` with these patches (none: nothing changed for the server).
    case update(id: String, patches: [TelepatPatch])
    /// `DELETE /object/delete`.
    case delete(id: String)
    /// Not sent: kept locally, marked rejected with this reason.
    case refused(reason: String)

    /// `ghost`: the object as the server has it (empty for one it never had); `value`: the
    /// local one (nil: removed).
    static func plan(key: String, model: String, onServer: Bool, ghost: JSONObject, value: JSONObject?) -> TelepatSave {
        guard let value else { return .delete(id: key) }
        if !onServer {
            if let field = TelepatObject.immutableField(in: value.keys.map(\.string)) {
                return .refused(reason: "a new object cannot set `\(field)`: Telepat assigns it (remove the field and save again)")
            }
            return .create(content: value)
        }
        let changed = Set(ghost.keys).union(value.keys).filter { ghost[$0] != value[$0] }.map(\.string)
        if let field = TelepatObject.immutableField(in: changed) {
            return .refused(reason: "`\(field)` cannot be changed: Telepat's immutable fields are \(TelepatObject.immutableFields.sorted().joined(separator: ", ")); nothing was sent")
        }
        return .update(id: key, patches: TelepatObject.patches(from: ghost, to: value, model: model, id: key))
    }

    /// Whether `object` (from the server) is what a create of `content` made: every field sent
    /// is there, unchanged.
    static func created(_ object: JSONObject, matches content: JSONObject) -> Bool {
        content.allSatisfy { object[$0.key] == $0.value }
    }
}
