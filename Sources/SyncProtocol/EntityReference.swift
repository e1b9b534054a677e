import JSONDiff

/// `key.version` as used by `e` in both directions; keys may contain dots, so the version is
/// whatever follows the LAST dot.
struct EntityReference {
    var key: String
    var version: Int

    init(key: String, version: Int) {
        self.key = key
        self.version = version
    }

    init(parsing text: Substring) throws(ProtocolError) {
        guard let dot = text.utf8.lastIndex(of: UInt8(ascii: ".")) else {
            throw .missingVersion(excerpt(text))
        }
        let versionText = text[text.utf8.index(after: dot)...]
        guard let version = parseDecimal(versionText) else {
            throw .invalidValue(field: "version", value: excerpt(versionText))
        }
        self.key = String(text[..<dot])
        self.version = version
    }

    var rendered: String { "\(key).\(version)" }
}

/// The body of the server's `e` reply (spec "Entity: e").
public enum EntityReply: Hashable, Sendable {
    /// `{"data": {...}}`: the entity at that version. bucketfs's own server adds
    /// `"accepted_at"`, when it accepted that version (Unix seconds), and `"ccid"`, the ccid of
    /// the change that made it while the server's change log still holds that change (a client
    /// tells by it whether the version is the one its own change made, or the same number and
    /// data in another history of a server restored from a backup); other servers send neither.
    case data(JSONObject, acceptedAt: Double? = nil, ccid: String? = nil)
    /// `?`: the server has no such key or version.
    case unknown

    /// The wire name of the acceptance time, an extra field only bucketfs's server sends.
    static let acceptedAtField = "accepted_at"
    /// The wire name of the ccid of the change that made the version, another of bucketfs's own.
    static let ccidField = "ccid"

    /// Parses the line after `e:key.v\n`. `{"data": null}` is read as unknown (nothing to apply).
    init(body: Substring) throws(ProtocolError) {
        if body == "?" {
            self = .unknown
            return
        }
        let fields = try JSONFields(parsing: String(body), field: "e")
        guard fields.object.keys.contains("data") else { throw .missingField("data") }
        guard let data = try fields.optionalObject("data") else {
            self = .unknown
            return
        }
        // A time that is not a number is not ours to read: the data still counts.
        let acceptedAt: Double? = switch fields.object[JSONKey(Self.acceptedAtField)] {
        case .double(let seconds)?: seconds
        case .integer(let seconds)?: Double(seconds)
        default: nil
        }
        let ccid: String? = if case .string(let ccid)? = fields.object[JSONKey(Self.ccidField)] { ccid } else { nil }
        self = .data(data, acceptedAt: acceptedAt, ccid: ccid)
    }

    var rendered: String {
        switch self {
        case .unknown: return "?"
        case .data(let object, let acceptedAt, let ccid):
            var json = OrderedJSONObject()
            json.add("data", .object(object))
            if let acceptedAt { json.add(Self.acceptedAtField, .double(acceptedAt)) }
            if let ccid { json.add(Self.ccidField, string: ccid) }
            return json.rendered()
        }
    }
}
