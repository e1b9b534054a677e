import JSONDiff
import Synchronization

/// The changes this store handed to a connection, each with the value it brings its entity to,
/// so that the server's acknowledgement of one is applied without parsing the ghost, applying
/// the diff, rendering the result and diffing the local value against it again: the server's
/// value is what was sent, known as text already.
///
/// `reconcileQueue` computes a queued change from the ghost and the local value, and hands the
/// three over with it (`OutgoingChange.basis`); `markSent` remembers them. The local value may
/// move on while the change is in flight, and a change requeued after an error goes again as it
/// was: only what it was computed from is what it brings about. Only memory: after a restart, or
/// for a change the bounded table let go, the acknowledgement takes the general path, which gives
/// the same result.
final class SentChanges: Sendable {
    /// A change as it went out, and what it applies to and brings about.
    struct Sent: Hashable, Sendable {
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

    /// Changes in flight are few while connected; a reconnect sends everything owed at once.
    /// Past these bounds (entries, and bytes of ghost and value text: entity files may hold
    /// 16 MiB each) older entries make room, arbitrarily: any entry is only a shortcut, and a
    /// change without one (or with a stale one, which the check at its echo refuses) is
    /// acknowledged the general way.
    static let capacity = 4096
    static let byteCapacity = 32 << 20
    private let table = Mutex(Table())

    private struct Table {
        var entries: [String: Sent] = [:]
        var bytes = 0

        mutating func remove(_ ccid: String) -> Sent? {
            guard let sent = entries.removeValue(forKey: ccid) else { return nil }
            bytes -= sent.bytes
            return sent
        }
    }

    func remember(ccid: String, _ sent: Sent) {
        guard sent.bytes <= Self.byteCapacity else { return }
        table.withLock { table in
            _ = table.remove(ccid)
            while table.entries.count >= Self.capacity || table.bytes + sent.bytes > Self.byteCapacity,
                let any = table.entries.keys.first
            {
                _ = table.remove(any)
            }
            table.entries[ccid] = sent
            table.bytes += sent.bytes
        }
    }

    func take(ccid: String) -> Sent? {
        table.withLock { $0.remove(ccid) }
    }

    var count: Int { table.withLock { $0.entries.count } }
    var bytes: Int { table.withLock { $0.bytes } }
}

extension SentChanges.Sent {
    /// What holding it costs, near enough (the UTF-8 of its texts).
    var bytes: Int { diff.utf8.count + ghost.utf8.count + result.utf8.count }
}
