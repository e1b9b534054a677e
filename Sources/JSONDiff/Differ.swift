/// Diff generation: the operations that turn one value into another.
enum Differ {
    static func objectDiff(from source: JSONObject, to target: JSONObject, attributes: [JSONKey: DiffPolicy]) -> ObjectDiff {
        var diff = ObjectDiff()
        for (key, old) in source {
            if let new = target[key] {
                if old != new { diff[key] = valueDiff(from: old, to: new, policy: attributes[key]) }
            } else {
                diff[key] = .remove
            }
        }
        for (key, new) in target where source[key] == nil {
            diff[key] = .insert(new)
        }
        return diff
    }

    /// The operation turning `source` into `target`, which must differ.
    static func valueDiff(from source: JSONValue, to target: JSONValue, policy: DiffPolicy?) -> DiffOp {
        switch policy?.operationType {
        case .replace?:
            return .replace(target)
        case .integer?:
            if let amount = increment(from: source, to: target) { return .increment(amount) }
        case .list?:
            if case .array(let old) = source, case .array(let new) = target {
                return .list(listDiff(from: old, to: new, itemPolicy: policy?.item))
            }
        case .listDMP?:
            if case .array(let old) = source, case .array(let new) = target {
                return .listDelta(TextDelta.lineDelta(from: TextDelta.listText(old), to: TextDelta.listText(new)))
            }
        case .string?, nil:
            break
        }
        switch (source, target) {
        case (.object(let old), .object(let new)):
            return .object(objectDiff(from: old, to: new, attributes: policy?.attributes ?? [:]))
        case (.string(let old), .string(let new)):
            return .stringDelta(TextDelta.stringDelta(from: old, to: new))
        default:
            // Numbers, booleans, null, arrays without a list policy, and type changes (reference default).
            return .replace(target)
        }
    }

    /// `target - source` when adding it back reproduces `target` exactly; nil otherwise (then the
    /// caller falls back to replace, e.g. for big integers or inexact float differences).
    static func increment(from source: JSONValue, to target: JSONValue) -> JSONValue? {
        switch (source, target) {
        case (.integer(let old), .integer(let new)):
            let (amount, overflow) = new.subtractingReportingOverflow(old)
            return overflow ? nil : .integer(amount)
        case (.double, .double), (.integer, .double), (.double, .integer):
            guard let old = source.doubleValue, let new = target.doubleValue else { return nil }
            let amount = new - old
            guard amount.isFinite, let sum = try? Applier.increment(source, by: .double(amount)), sum == target else {
                return nil
            }
            return .double(amount)
        default:
            return nil
        }
    }

    /// An index-keyed list diff from an item-level edit script (diff-match-patch over one symbol per
    /// distinct item). Adjacent deletions and insertions pair up into per-item diffs, so a changed
    /// item becomes one operation (`r`, or `I`/`O`/`d`... per the item policy).
    static func listDiff(from source: [JSONValue], to target: [JSONValue], itemPolicy: DiffPolicy?) -> ListDiff {
        var prefix = 0
        while prefix < source.count, prefix < target.count, source[prefix] == target[prefix] { prefix += 1 }
        var suffix = 0
        while suffix < source.count - prefix, suffix < target.count - prefix,
              source[source.count - 1 - suffix] == target[target.count - 1 - suffix] { suffix += 1 }
        let old = source[prefix..<source.count - suffix]
        let new = target[prefix..<target.count - suffix]

        var script = ListEditScript(start: prefix)
        var alphabet = SymbolAlphabet<JSONValue>()
        if !old.isEmpty, !new.isEmpty, let oldSymbols = alphabet.encode(old), let newSymbols = alphabet.encode(new) {
            var oldIndex = old.startIndex
            var newIndex = new.startIndex
            var deleted: [JSONValue] = []
            var inserted: [JSONValue] = []
            func flush() {
                script.replace(deleted, with: inserted, itemPolicy: itemPolicy)
                deleted.removeAll()
                inserted.removeAll()
            }
            for diff in TextDelta.dmp.diffMain(oldSymbols, newSymbols, checkLines: false) {
                let count = diff.text.unicodeScalars.count
                switch diff.operation {
                case .equal:
                    flush()
                    script.keep(count)
                    oldIndex += count
                    newIndex += count
                case .delete:
                    deleted.append(contentsOf: old[oldIndex..<oldIndex + count])
                    oldIndex += count
                case .insert:
                    inserted.append(contentsOf: new[newIndex..<newIndex + count])
                    newIndex += count
                }
            }
            flush()
        } else {
            script.replace(Array(old), with: Array(new), itemPolicy: itemPolicy)
        }
        return script.operations
    }
}

/// Builds index keys for a left-to-right edit of a list, in the reference's apply convention:
/// ops run in ascending key order and key k acts at position k minus the removals before it.
struct ListEditScript {
    private(set) var operations: ListDiff = [:]
    /// Position in the list being edited (earlier edits done).
    private var position: Int
    private var removals = 0

    init(start: Int = 0) {
        position = start
    }

    mutating func keep(_ count: Int) {
        position += count
    }

    mutating func insert(_ value: JSONValue) {
        operations[position + removals] = .insert(value)
        position += 1
    }

    mutating func remove() {
        operations[position + removals] = .remove
        removals += 1
    }

    /// An operation on the item at the current position (not `+`/`-`).
    mutating func modify(_ operation: DiffOp) {
        operations[position + removals] = operation
        position += 1
    }

    mutating func replace(_ deleted: [JSONValue], with inserted: [JSONValue], itemPolicy: DiffPolicy?) {
        let paired = min(deleted.count, inserted.count)
        for index in 0..<paired {
            if deleted[index] == inserted[index] {
                keep(1)
            } else {
                modify(Differ.valueDiff(from: deleted[index], to: inserted[index], policy: itemPolicy))
            }
        }
        for _ in paired..<deleted.count { remove() }
        for value in inserted[paired...] { insert(value) }
    }
}
