import JSONDiff

/// What the server pushes to subscribed devices (`42["message", {"data": ...}]`): created,
/// updated and deleted objects, in the seed's shapes.
public struct TelepatNotification: Hashable, Sendable {
    public var new: [Entry]
    public var updated: [Entry]
    public var deleted: [Entry]

    /// One created object, one patch of an updated one, or one deleted object.
    public struct Entry: Hashable, Sendable {
        /// `create`, `update` or `delete`.
        public var op: String
        /// The whole object (`new` and `deleted`).
        public var object: JSONObject?
        /// The change (`updated`).
        public var patch: TelepatPatch?
        public var subscriptions: [String]
        public var applicationID: String
        /// Microseconds since 1970.
        public var timestamp: Int64

        public init(op: String, object: JSONObject? = nil, patch: TelepatPatch? = nil, subscriptions: [String], applicationID: String, timestamp: Int64) {
            self.op = op
            self.object = object
            self.patch = patch
            self.subscriptions = subscriptions
            self.applicationID = applicationID
            self.timestamp = timestamp
        }

        public static func created(_ object: JSONObject, subscriptions: [String], applicationID: String, timestamp: Int64) -> Entry {
            Entry(op: "create", object: object, subscriptions: subscriptions, applicationID: applicationID, timestamp: timestamp)
        }

        public static func updated(_ patch: TelepatPatch, subscriptions: [String], applicationID: String, timestamp: Int64) -> Entry {
            Entry(op: "update", patch: patch, subscriptions: subscriptions, applicationID: applicationID, timestamp: timestamp)
        }

        public static func deleted(_ object: JSONObject, subscriptions: [String], applicationID: String, timestamp: Int64) -> Entry {
            Entry(op: "delete", object: object, subscriptions: subscriptions, applicationID: applicationID, timestamp: timestamp)
        }

        init(parsing value: JSONValue, field: String) throws(TelepatProtocolError) {
            let fields = try TelepatFields(value, field: field)
            let subscriptions = try (fields.optionalArray("subscriptions") ?? []).map { (item) throws(TelepatProtocolError) -> String in
                guard case .string(let name) = item else { throw .wrongType(field: "subscriptions", expected: "an array of strings") }
                return name
            }
            let patch = try fields.present("patch").map { (value) throws(TelepatProtocolError) in try TelepatPatch(parsing: value) }
            self.init(
                op: try fields.optionalString("op") ?? "", object: try fields.optionalObject("object"), patch: patch,
                subscriptions: subscriptions, applicationID: try fields.optionalString("application_id") ?? "",
                timestamp: try fields.optionalInt64("timestamp") ?? 0
            )
        }

        public var json: JSONValue {
            let fields: JSONObject = [
                "op": .string(op), "subscriptions": .array(subscriptions.map { .string($0) }),
                "application_id": .string(applicationID), "timestamp": .integer(timestamp),
            ]
            return .object(fields.setting("object", object.map { .object($0) }).setting("patch", patch?.json))
        }
    }

    public init(new: [Entry] = [], updated: [Entry] = [], deleted: [Entry] = []) {
        self.new = new
        self.updated = updated
        self.deleted = deleted
    }

    public var isEmpty: Bool { new.isEmpty && updated.isEmpty && deleted.isEmpty }

    /// Parses the event's argument: `{"data": {"new": [...], "updated": [...], "deleted": [...]}}`
    /// (a missing list reads as empty).
    public init(parsing value: JSONValue) throws(TelepatProtocolError) {
        let data = try TelepatFields(.object(TelepatFields(value, field: "message").object("data")), field: "data")
        func entries(_ key: String) throws(TelepatProtocolError) -> [Entry] {
            var result: [Entry] = []
            for item in try data.optionalArray(key) ?? [] { result.append(try Entry(parsing: item, field: key)) }
            return result
        }
        self.init(new: try entries("new"), updated: try entries("updated"), deleted: try entries("deleted"))
    }

    public var json: JSONValue {
        .object([
            "data": .object([
                "new": .array(new.map(\.json)), "updated": .array(updated.map(\.json)), "deleted": .array(deleted.map(\.json)),
            ]),
        ])
    }
}
