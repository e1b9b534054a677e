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
    /// `{"data": {...}}`: the entity at that version.
    case data(JSONObject)
    /// `?`: the server has no such key or version.
    case unknown

    /// Parses the line after `e:key.v\n`. `{"data": null}` is read as unknown (nothing to apply).
    init(body: Substring) throws(ProtocolError) {
        if body == "?" {
            self = .unknown
            return
        }
        let fields = try JSONFields(parsing: String(body), field: "e")
        guard fields.object.keys.contains("data") else { throw .missingField("data") }
        if let data = try fields.optionalObject("data") {
            self = .data(data)
        } else {
            self = .unknown
        }
    }

    var rendered: String {
        switch self {
        case .unknown: return "?"
        case .data(let object):
            var json = OrderedJSONObject()
            json.add("data", .object(object))
            return json.rendered()
        }
    }
}
