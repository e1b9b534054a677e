/// Simperium's jsondiff: diff, apply and transform JSON objects, wire-compatible with the
/// reference implementation (see DESIGN.md "jsondiff facts").
public enum JSONDiffing {
    /// The diff turning `a` into `b` (`[:]` when equal). Defaults as the reference: strings `d`,
    /// nested objects `O`, everything else (numbers, booleans, arrays, type changes) `r`, unless
    /// the policy asks for `I` (integer), `L` (list), `dL` (list_dmp) or `r` (replace).
    public static func diff(from a: JSONObject, to b: JSONObject, policy: DiffPolicy? = nil) -> ObjectDiff {
        Differ.objectDiff(from: a, to: b, attributes: policy?.attributes ?? [:])
    }

    /// Applies a diff (possibly from another implementation); anything that does not fit the
    /// object is a typed error, never a partial or guessed result.
    public static func apply(_ diff: ObjectDiff, to value: JSONObject) throws(JSONDiffError) -> JSONObject {
        try Applier.apply(diff, to: value)
    }

    /// Rebases `local` over `remote` (both diffs of `base`): the result applies to
    /// `apply(remote, to: base)`. Non-conflicting edits are kept; on conflict the local edit wins,
    /// text edits are merged, increments add up, list positions shift. Every key is rebased
    /// (the reference JS returns after the first one).
    public static func transform(_ local: ObjectDiff, over remote: ObjectDiff, base: JSONObject,
                                 policy: DiffPolicy? = nil) throws(JSONDiffError) -> ObjectDiff {
        try Transformer.transform(local, over: remote, base: base, attributes: policy?.attributes ?? [:])
    }

    /// Reads the `v` of a change: `{key: {"o": .., "v": ..}}`.
    public static func decode(_ json: JSONValue) throws(JSONDiffError) -> ObjectDiff {
        try DiffCodec.decodeObjectDiff(json)
    }

    /// The wire form of a diff (the `v` of a change).
    public static func encode(_ diff: ObjectDiff) -> JSONValue {
        DiffCodec.encodeObjectDiff(diff)
    }

    /// Reads one operation `{"o": .., "v": ..}`.
    public static func decodeOperation(_ json: JSONValue) throws(JSONDiffError) -> DiffOp {
        try DiffCodec.decodeOperation(json)
    }

    /// The wire form of one operation.
    public static func encodeOperation(_ operation: DiffOp) -> JSONValue {
        DiffCodec.encodeOperation(operation)
    }
}
