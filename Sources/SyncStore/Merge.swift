import JSONDiff

/// The store's use of jsondiff, on diffs in their wire form (`{key: {"o","v"}}`) so that the
/// queue stores exactly what is sent.
enum Merge {
    static func diff(from source: JSONObject, to target: JSONObject) throws -> JSONObject {
        let diff = JSONDiffing.diff(from: source, to: target)
        return JSONDiffing.encode(diff).objectValue ?? [:]
    }

    static func apply(_ wireDiff: JSONObject, to object: JSONObject) throws -> JSONObject {
        let diff = try JSONDiffing.decode(.object(wireDiff))
        return try JSONDiffing.apply(diff, to: object)
    }

    /// The local value rebased onto `newGhost`: the local edit (old ghost -> local) is
    /// transformed over the remote edit (old ghost -> new ghost), so both survive.
    static func rebase(local: JSONObject, oldGhost: JSONObject, newGhost: JSONObject, remoteDiff: JSONObject?) throws -> JSONObject {
        let localDiff = JSONDiffing.diff(from: oldGhost, to: local)
        if localDiff.isEmpty { return newGhost }
        let remote = try remoteDiff.map { try JSONDiffing.decode(.object($0)) } ?? JSONDiffing.diff(from: oldGhost, to: newGhost)
        if remote.isEmpty { return local }
        let rebased = try JSONDiffing.transform(localDiff, over: remote, base: oldGhost)
        return try JSONDiffing.apply(rebased, to: newGhost)
    }
}
