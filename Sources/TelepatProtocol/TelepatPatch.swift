import JSONDiff

/// Where a patch points: `<model>/<object id>/<key>`. Telepat objects are flat at the patch
/// level, so the key is one top-level member (it may itself contain no `/`).
public struct TelepatPatchPath: Hashable, Sendable, CustomStringConvertible {
    public var model: String
    public var id: String
    public var key: String

    public init(model: String, id: String, key: String) {
        self.model = model
        self.id = id
        self.key = key
    }

    public init(parsing text: String) throws(TelepatProtocolError) {
        let parts = text.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 3, parts.allSatisfy({ !$0.isEmpty }) else {
            throw .invalidValue(field: "path", value: "'\(text)' is not <model>/<id>/<key>")
        }
        self.init(model: String(parts[0]), id: String(parts[1]), key: String(parts[2]))
    }

    public var description: String { "\(model)/\(id)/\(key)" }
}

/// One change to one top-level key of an object.
public struct TelepatPatch: Hashable, Sendable {
    public enum Operation: String, Hashable, Sendable, CaseIterable {
        /// Sets the key to `value` (adds it when absent).
        case replace
        /// Adds the number `value` to the key's number (a missing key counts as 0).
        case increment
        /// Appends `value` to the key's array (a missing key: a new array), or a string to its string.
        case append
        /// Removes the key; `value` is not used.
        case remove
    }

    public var operation: Operation
    public var path: TelepatPatchPath
    public var value: JSONValue?

    public init(_ operation: Operation, path: TelepatPatchPath, value: JSONValue? = nil) {
        self.operation = operation
        self.path = path
        self.value = value
    }

    public init(parsing json: JSONValue) throws(TelepatProtocolError) {
        let fields = try TelepatFields(json, field: "patch")
        let name = try fields.string("op")
        guard let operation = Operation(rawValue: name) else {
            throw .invalidValue(field: "op", value: "'\(name)' (expected replace, increment, append or remove)")
        }
        let path = try TelepatPatchPath(parsing: fields.string("path"))
        // `null` is a value a replace may set, so presence is read from the object itself.
        let value = fields.object[JSONKey("value")]
        switch operation {
        case .replace, .append:
            guard value != nil else { throw .missingField("value") }
        case .increment:
            guard let value, value.doubleValue != nil else { throw .wrongType(field: "value", expected: "a number") }
        case .remove:
            break
        }
        self.init(operation, path: path, value: operation == .remove ? nil : value)
    }

    public var json: JSONValue {
        .object(JSONObject().setting("op", .string(operation.rawValue)).setting("path", .string(path.description)).setting("value", value))
    }
}

/// Why a patch could not be applied to an object.
public enum TelepatPatchError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The patch changes a field the server owns (`TelepatObject.immutableFields`).
    case immutableField(String)
    /// The patch's path names another model or object than the request.
    case wrongTarget(TelepatPatchPath)
    /// `increment` of a non-number, `append` to something that is neither array nor string.
    case typeMismatch(key: String, operation: TelepatPatch.Operation, found: String)

    public var description: String {
        switch self {
        case .immutableField(let key): return "field '\(key)' cannot be modified"
        case .wrongTarget(let path): return "patch path '\(path)' does not name the object of the request"
        case .typeMismatch(let key, let operation, let found): return "cannot \(operation.rawValue) field '\(key)' holding \(found)"
        }
    }
}
