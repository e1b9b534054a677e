import JSONDiff

/// The deepest nesting a change may bring into what the server sends back. Our parser (and
/// so our clients) accepts 512 levels (`JSONValue.maxNestingDepth`); an entity that fits in
/// the change that made it can sit deeper in the messages that carry it (issue 20: a value
/// nested 509 levels was accepted, and its broadcast and index page were 513 deep, past what
/// clients can read). A change is refused (400) unless both of these stay within the limit:
/// - the broadcast `c:[{..., "v": diff}]`: the array and the change object around the diff;
/// - the index page `{"index": [{"d": data}]}`: the page, its array and the entry around the data.
enum SendableNesting {
    static let broadcastLevelsAroundDiff = 2
    static let indexPageLevelsAroundData = 3

    static func fits(data: JSONObject, diff: ObjectDiff) -> Bool {
        let limit = JSONValue.maxNestingDepth
        return depth(.object(data)) + indexPageLevelsAroundData <= limit
            && depth(JSONDiffing.encode(diff)) + broadcastLevelsAroundDiff <= limit
    }

    /// Containers on the deepest path (a scalar is 0, `{}` is 1), as the parser counts.
    static func depth(_ value: JSONValue) -> Int {
        switch value {
        case .array(let items): return 1 + (items.lazy.map(depth).max() ?? 0)
        case .object(let members): return 1 + (members.values.lazy.map(depth).max() ?? 0)
        default: return 0
        }
    }
}
