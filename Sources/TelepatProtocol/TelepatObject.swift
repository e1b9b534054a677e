import JSONDiff

/// What Telepat objects have in common: flat JSON objects whose identity and bookkeeping fields
/// the server owns; last writer wins per top-level key.
public enum TelepatObject {
    /// Fields no patch or create may set: the server assigns them.
    public static let immutableFields: Set<String> = ["id", "type", "created", "modified", "application_id", "context_id"]

    /// The first immutable field among `keys`, if any (sorted, so the answer is stable).
    public static func immutableField(in keys: some Sequence<String>) -> String? {
        keys.filter { immutableFields.contains($0) }.sorted().first
    }

    /// `object` after `patches`, in order; `modified` becomes `now` when anything changed.
    /// Every patch must name `model`/`id`; none may touch an immutable field.
    public static func applying(
        _ patches: [TelepatPatch], to object: JSONObject, model: String, id: String, now: Int64
    ) throws(TelepatPatchError) -> JSONObject {
        var result = object
        for patch in patches {
            guard patch.path.model == model, patch.path.id == id else { throw .wrongTarget(patch.path) }
            guard !immutableFields.contains(patch.path.key) else { throw .immutableField(patch.path.key) }
            result = try applying(patch, to: result)
        }
        if result != object { result["modified"] = .integer(now) }
        return result
    }

    /// `object` after one patch of its key, by the patch's meaning: `replace` sets the value,
    /// `remove` drops the key, `increment` adds a number to the key's number (a missing key
    /// counts as 0), `append` adds the value to the key's array (a missing key: a new array) or a
    /// string to its string. Nothing else is checked or touched (a client applies the server's
    /// notifications with it, `modified` included).
    public static func applying(_ patch: TelepatPatch, to object: JSONObject) throws(TelepatPatchError) -> JSONObject {
        var result = object
        let key = patch.path.key
        let jsonKey = JSONKey(key)
        let current = result[jsonKey]
        switch patch.operation {
        case .replace:
            result[jsonKey] = patch.value ?? .null
        case .remove:
            result[jsonKey] = nil
        case .increment:
            result[jsonKey] = try increment(current, by: patch.value ?? .integer(0), key: key)
        case .append:
            let value = patch.value ?? .null
            switch current {
            case nil, .null?: result[jsonKey] = .array([value])
            case .array(let items)?: result[jsonKey] = .array(items + [value])
            case .string(let text)?:
                guard case .string(let tail) = value else {
                    throw .typeMismatch(key: key, operation: .append, found: "a string (appending \(value.typeName))")
                }
                result[jsonKey] = .string(text + tail)
            case let other?:
                throw .typeMismatch(key: key, operation: .append, found: other.typeName)
            }
        }
        return result
    }

    private static func increment(_ current: JSONValue?, by delta: JSONValue, key: String) throws(TelepatPatchError) -> JSONValue {
        let base = current ?? .integer(0)
        if case .integer(let a) = base, case .integer(let b) = delta {
            let (sum, overflow) = a.addingReportingOverflow(b)
            if !overflow { return .integer(sum) }
        }
        guard let a = base.doubleValue, let b = delta.doubleValue else {
            throw .typeMismatch(key: key, operation: .increment, found: base.typeName)
        }
        return .double(a + b)
    }

    /// The `replace` (and `remove`) patches that turn `old` into `new`, one per changed
    /// top-level key, sorted by key; the server's bookkeeping fields are left out.
    public static func patches(from old: JSONObject, to new: JSONObject, model: String, id: String) -> [TelepatPatch] {
        let keys = Set(old.keys).union(new.keys).sorted()
        return keys.compactMap { key -> TelepatPatch? in
            guard key.string != "modified", old[key] != new[key] else { return nil }
            let path = TelepatPatchPath(model: model, id: id, key: key.string)
            guard let value = new[key] else { return TelepatPatch(.remove, path: path) }
            return TelepatPatch(.replace, path: path, value: value)
        }
    }

    /// A new object as the server stores it: `content` plus the fields the server assigns.
    public static func created(
        content: JSONObject, id: String, model: String, context: String, applicationID: String, userID: String?, now: Int64
    ) -> JSONObject {
        var object = content
        object["id"] = .string(id)
        object["type"] = .string(model)
        object["context_id"] = .string(context)
        object["application_id"] = .string(applicationID)
        object["created"] = .integer(now)
        object["modified"] = .integer(now)
        if let userID { object["user_id"] = .string(userID) }
        return object
    }
}
