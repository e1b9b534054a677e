import DiffMatchPatch

/// Rebasing a local diff over a concurrent remote diff made from the same base, so that applying
/// the result after the remote diff keeps both edits where they do not collide, and lets the
/// local edit win where they do (the reference jsondiff's rules, applied to every key).
enum Transformer {
    static func transform(_ local: ObjectDiff, over remote: ObjectDiff, base: JSONObject,
                          attributes: [JSONKey: DiffPolicy]) throws(JSONDiffError) -> ObjectDiff {
        var result = ObjectDiff(minimumCapacity: local.count)
        for (key, localOperation) in local {
            guard let remoteOperation = remote[key] else {
                result[key] = localOperation
                continue
            }
            let rebased = try at(key.string) { () throws(JSONDiffError) in
                try transform(localOperation, over: remoteOperation, base: base[key], policy: attributes[key])
            }
            if let rebased { result[key] = rebased }
        }
        return result
    }

    /// The local operation on one key or item rebased over the remote one; nil when nothing is
    /// left to do. `base` is the value both started from (nil for a key that did not exist).
    static func transform(_ local: DiffOp, over remote: DiffOp, base: JSONValue?,
                          policy: DiffPolicy?) throws(JSONDiffError) -> DiffOp? {
        switch (local, remote) {
        case (.insert(let mine), .insert(let theirs)):
            // Both added the key: same value is done; otherwise local wins, as an edit of theirs.
            return mine == theirs ? nil : Differ.valueDiff(from: theirs, to: mine, policy: policy)
        case (.insert, .remove):
            return local  // (inconsistent pair) the key is gone again, so adding it fits
        case (.insert(let mine), _):
            return .replace(mine)  // (inconsistent pair) the key exists after the remote edit
        case (.remove, .remove):
            return nil
        case (.remove, _):
            return .remove  // local removal wins over a remote edit
        case (_, .remove):
            // Remote removed what local edited: local wins by adding back its edited value.
            return .insert(try localValue(local, base: base))
        case (.replace, _):
            return local
        case (_, .insert):
            return .replace(try localValue(local, base: base))  // (inconsistent pair)
        case (.increment, .increment):
            return local  // increments commute: both are counted
        case (.object(let mine), .object(let theirs)):
            guard case .object(let object)? = base else { throw mismatch(local, base) }
            let rebased = try transform(mine, over: theirs, base: object, attributes: policy?.attributes ?? [:])
            return rebased.isEmpty ? nil : .object(rebased)
        case (.list(let mine), .list(let theirs)):
            guard case .array(let list)? = base else { throw mismatch(local, base) }
            let rebased = try transformList(mine, over: theirs, base: list, itemPolicy: policy?.item)
            return rebased.isEmpty ? nil : .list(rebased)
        case (.stringDelta(let mine), .stringDelta(let theirs)):
            // Both deltas are of the same base text: merged exactly, not by fuzzy patching.
            guard case .string(let text)? = base else { throw mismatch(local, base) }
            let merge = try TextMerge(local: mine, remote: theirs, base: text)
            return merge.changesRemote ? .stringDelta(merge.rebasedDelta) : nil
        case (.listDelta(let mine), .listDelta(let theirs)):
            guard case .array(let list)? = base else { throw mismatch(local, base) }
            let merge = try TextMerge(
                local: TextDelta.referenceListDelta(mine, list: list),
                remote: TextDelta.referenceListDelta(theirs, list: list), base: TextDelta.listText(list))
            if !merge.changesRemote { return nil }
            // Deltas not cut at line ends (other clients) can merge into a line that is not an
            // item; then the whole local list wins instead.
            guard (try? TextDelta.items(fromListText: merge.mergedText)) != nil else {
                return .replace(try localValue(local, base: base))
            }
            return .listDelta(merge.rebasedDelta)
        case (.increment(let amount), .replace(let theirs)):
            // Still a number: the increment counts on top of the remote value.
            if (try? Applier.increment(theirs, by: amount)) != nil { return local }
            return .replace(try localValue(local, base: base))
        case (.stringDelta(let mine), .replace(.string(let theirs))):
            // Remote replaced the text: the local edit is merged into it like a concurrent delta.
            guard case .string(let text)? = base else { throw mismatch(local, base) }
            _ = try TextDelta.apply(mine, to: text)
            // Not the same base text, so no exact merge: the reference's fuzzy patching.
            let patches = TextDelta.dmp.patchMake(text, try TextDelta.diffs(mine, of: text))
            let merged = TextDelta.dmp.patchApply(patches, to: theirs).text
            return merged == theirs ? nil : .stringDelta(TextDelta.stringDelta(from: theirs, to: merged))
        default:
            // Different kinds of edit of the same value (e.g. different policies): local wins whole.
            return .replace(try localValue(local, base: base))
        }
    }

    /// The value the local operation produced from the base.
    private static func localValue(_ local: DiffOp, base: JSONValue?) throws(JSONDiffError) -> JSONValue {
        guard let base else { throw .missingKey(path: []) }
        return try Applier.apply(local, to: base)
    }

    private static func mismatch(_ operation: DiffOp, _ value: JSONValue?) -> JSONDiffError {
        guard let value else { return .missingKey(path: []) }
        return .typeMismatch(path: [], operation: operation.code, found: value.typeName)
    }

    /// Lists: both diffs restated per original item and gap, then merged in list order. In each
    /// gap the local insertions go before the remote ones (the reference's conformance cases).
    static func transformList(_ local: ListDiff, over remote: ListDiff, base: [JSONValue],
                              itemPolicy: DiffPolicy?) throws(JSONDiffError) -> ListDiff {
        let mine = try ListEdits(local, count: base.count)
        let theirs = try ListEdits(remote, count: base.count)
        var script = ListEditScript()
        for index in 0...base.count {
            for value in mine.gaps[index] { script.insert(value) }
            script.keep(theirs.gaps[index].count)
            guard index < base.count else { break }
            switch (mine.items[index], theirs.items[index]) {
            case (nil, .remove?), (.remove?, .remove?):
                break
            case (nil, _):
                script.keep(1)
            case (.remove?, _):
                script.remove()
            case (let operation?, nil):
                script.modify(operation)
            case (let operation?, let remoteOperation?):
                let rebased = try at(String(index)) { () throws(JSONDiffError) in
                    try transform(operation, over: remoteOperation, base: base[index], policy: itemPolicy)
                }
                let removedRemotely = remoteOperation == .remove
                switch rebased {
                case nil: if !removedRemotely { script.keep(1) }
                case .insert(let value)?: script.insert(value)  // the item was removed remotely
                case .remove?: if !removedRemotely { script.remove() }
                case let other?: script.modify(other)
                }
            }
        }
        return script.operations
    }
}
