/// A list diff restated against the original list: what happens to each original item, and
/// which new items go into each gap (gap g is just before original item g; gap n is the end).
///
/// Built by replaying the reference's apply rule (ascending keys; key k acts at position k minus
/// the removals before it). In that replay positions never move backwards, so one forward pass
/// suffices, and every index is checked against the list.
struct ListEdits {
    /// Per original item: nil (untouched), `.remove`, or the operation on it.
    var items: [DiffOp?]
    /// Per gap (count + 1 of them): the values inserted there, in order.
    var gaps: [[JSONValue]]

    init(_ diff: ListDiff, count: Int) throws(JSONDiffError) {
        items = Array(repeating: nil, count: count)
        gaps = Array(repeating: [], count: count + 1)
        var next = 0         // first original item not yet passed
        var processed = 0    // items before `next` in the list being edited
        var removals = 0
        for (key, operation) in diff.sorted(by: { $0.key < $1.key }) {
            let position = key - removals
            let liveCount = processed + (count - next)
            guard key >= 0, position >= processed, position - processed <= count - next else {
                throw .indexOutOfRange(path: [String(key)], index: key, count: liveCount)
            }
            next += position - processed
            processed = position
            switch operation {
            case .insert(let value):
                gaps[next].append(value)
                processed += 1
            case .remove:
                guard next < count else { throw .indexOutOfRange(path: [String(key)], index: key, count: liveCount) }
                items[next] = .remove
                next += 1
                removals += 1
            default:
                guard next < count else { throw .indexOutOfRange(path: [String(key)], index: key, count: liveCount) }
                items[next] = operation
                next += 1
                processed += 1
            }
        }
    }
}
