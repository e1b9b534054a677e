import JSONDiff
import Synchronization

/// The changes this store handed to a connection, each with the value it brings its entity to,
/// so that the server's acknowledgement of one is applied without parsing the ghost, applying
/// the diff, rendering the result and diffing the local value against it again: the server's
/// value is what was sent, known as text already.
///
/// A queued change is always the diff from the ghost to the local value (`reconcileQueue`
/// computes it whenever either changes), so what it brings the entity to is the local value at
/// the time it is sent. Only memory: after a restart, or for a change the bounded table let go,
/// the acknowledgement takes the general path, which gives the same result.
final class SentChanges: Sendable {
    /// A change as it went out, and what it applies to and brings about.
    struct Sent: Sendable {
        let sourceVersion: Int?
        /// `pending_change.diff` as sent (compact JSON, sorted keys).
        let diff: String
        /// The ghost it applies to (`entity.ghost_data`).
        let ghost: String
        /// The ghost with the diff applied: the local value it was computed from.
        let result: String

        /// The entity's new ghost when `echo` (the server's diff, over `sourceVersion`) is this
        /// very change applied to the ghost the entity still holds; nil when anything differs
        /// (the change was recomputed or sent whole, the ghost moved, the server rebased it),
        /// and the general path then decides.
        func acknowledgedGhost(of open: ChangeRow, echo: JSONObject, sourceVersion: Int?, entity: EntityRow) -> String? {
            guard open.op == "M", open.fullData == nil, open.sv == self.sourceVersion, sourceVersion == self.sourceVersion,
                entity.ghostVersion == self.sourceVersion, !entity.needsReload, !entity.deletedPending,
                let sentDiff = open.diff, exactlyEqual(sentDiff, diff), exactlyEqual(entity.ghostData, ghost),
                exactlyEqual(StoredJSON.text(echo), diff)
            else { return nil }
            return result
        }
    }

    /// Changes in flight are few while connected; a reconnect sends everything owed at once, and
    /// past this many the rest are acknowledged the general way rather than held in memory.
    static let capacity = 4096
    private let entries = Mutex<[String: Sent]>([:])

    func remember(ccid: String, _ sent: Sent) {
        entries.withLock { entries in
            if entries.count >= Self.capacity, entries[ccid] == nil, let any = entries.keys.first {
                entries[any] = nil
            }
            entries[ccid] = sent
        }
    }

    func take(ccid: String) -> Sent? {
        entries.withLock { $0.removeValue(forKey: ccid) }
    }

    var count: Int { entries.withLock { $0.count } }
}
