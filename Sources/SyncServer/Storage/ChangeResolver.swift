import JSONDiff
import SyncProtocol

/// An entity as stored: its version and data; nil data is a deletion (the version lives on).
struct EntityState: Sendable, Hashable {
    var version: Int
    var data: JSONObject?
}

/// What an accepted change does to its entity.
enum ChangeResolution: Sendable, Hashable {
    /// The entity becomes `data`; `diff` takes the current version (or nothing) to it.
    case modify(data: JSONObject, diff: ObjectDiff, sourceVersion: Int?, endVersion: Int)
    /// The entity is deleted.
    case remove(sourceVersion: Int, endVersion: Int)
}

/// Decides, without I/O, whether and how a client change applies (spec "Error Responses").
enum ChangeResolver {
    /// - Parameter history: the data of an older version of the entity, if still kept.
    static func resolve(
        _ change: ChangeRequest, current: EntityState?, history: (Int) throws -> JSONObject?
    ) rethrows -> ChangeVerdict<ChangeResolution> {
        let nextVersion = (current?.version ?? 0) + 1
        let live = current?.data
        switch change.operation {
        case .remove:
            guard let current, live != nil else { return .refused(.notFound) }
            // Whatever version it names, as before: refusing a stale one (405) is untried with
            // Simperium's own clients. So a removal in flight while someone else removed the note
            // and another made it again takes the new one: a known gap (issue 34's notes).
            return .accepted(.remove(sourceVersion: current.version, endVersion: nextVersion))
        case .modify:
            if let full = change.data {
                // `d` is the client's recovery after 404/405/440: the whole object wins
                // (history keeps what it overwrote).
                return replace(live: live, currentVersion: current?.version, with: full, nextVersion: nextVersion)
            }
            guard let diff = change.diff else { return .refused(.invalidRequest) }
            guard let current, let live else {
                // A diff against a version of an entity the server does not have.
                if change.sourceVersion != nil { return .refused(.notFound) }
                guard let created = try? JSONDiffing.apply(diff, to: [:]) else { return .refused(.invalidDiff) }
                return .accepted(.modify(data: created, diff: diff, sourceVersion: nil, endVersion: nextVersion))
            }
            guard let sourceVersion = change.sourceVersion else { return .refused(.badVersion) }
            if sourceVersion == current.version {
                guard let updated = try? JSONDiffing.apply(diff, to: live) else { return .refused(.invalidDiff) }
                if updated == live { return .refused(.emptyChange) }
                return .accepted(.modify(data: updated, diff: diff, sourceVersion: current.version, endVersion: nextVersion))
            }
            guard sourceVersion > 0, sourceVersion < current.version, let base = try history(sourceVersion) else {
                return .refused(.badVersion)
            }
            // A stale sv: rebase the client's diff over what happened since, as the reference
            // server does, then broadcast the net effect against the current version.
            let remote = JSONDiffing.diff(from: base, to: live)
            guard let rebased = try? JSONDiffing.transform(diff, over: remote, base: base),
                  let updated = try? JSONDiffing.apply(rebased, to: live)
            else { return .refused(.invalidDiff) }
            if updated == live { return .refused(.emptyChange) }
            return .accepted(.modify(
                data: updated, diff: JSONDiffing.diff(from: live, to: updated), sourceVersion: current.version, endVersion: nextVersion
            ))
        }
    }

    private static func replace(
        live: JSONObject?, currentVersion: Int?, with full: JSONObject, nextVersion: Int
    ) -> ChangeVerdict<ChangeResolution> {
        guard let live, let currentVersion else {
            return .accepted(.modify(data: full, diff: JSONDiffing.diff(from: [:], to: full), sourceVersion: nil, endVersion: nextVersion))
        }
        if full == live { return .refused(.emptyChange) }
        return .accepted(.modify(data: full, diff: JSONDiffing.diff(from: live, to: full), sourceVersion: currentVersion, endVersion: nextVersion))
    }
}

/// The result of deciding on a change: accepted with a value, or refused with the error code the
/// sender gets (a code is an answer, not a thrown error).
enum ChangeVerdict<Value: Sendable & Hashable>: Sendable, Hashable {
    case accepted(Value)
    case refused(ChangeErrorCode)
}
