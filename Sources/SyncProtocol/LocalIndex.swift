import JSONDiff

/// The client's answer to the server's `index` request: its local state of the bucket
/// (spec "Remote index").
public struct LocalIndex: Hashable, Sendable {
    /// A change sent but not yet acknowledged.
    public struct Pending: Hashable, Sendable {
        /// The entity key.
        public var id: String
        /// The version the change applies to; nil for a create.
        public var sourceVersion: Int?
        /// The change id.
        public var ccid: String

        /// A pending change from its fields.
        public init(id: String, sourceVersion: Int?, ccid: String) {
            self.id = id
            self.sourceVersion = sourceVersion
            self.ccid = ccid
        }
    }

    /// The client's change version; nil before the first full index.
    public var current: String?
    /// The client's entities and their versions.
    public var index: [IndexPage.Entry]
    /// Unacknowledged changes.
    public var pending: [Pending]
    /// Anything else the client wants to report.
    public var extra: JSONObject?

    /// A local index from its fields.
    public init(current: String?, index: [IndexPage.Entry], pending: [Pending] = [], extra: JSONObject? = nil) {
        self.current = current
        self.index = index
        self.pending = pending
        self.extra = extra
    }

    /// Parses the JSON payload of the client's `index` reply; missing arrays are empty.
    public init(payload: String) throws(ProtocolError) {
        let fields = try JSONFields(parsing: payload, field: "index")
        self.current = try fields.optionalString("current")
        var entries: [IndexPage.Entry] = []
        for entry in try fields.objects("index") {
            let id = try entry.string("id")
            try EntityKey.validate(id)
            entries.append(IndexPage.Entry(id: id, version: try entry.version("v"), data: try entry.optionalObject("d")))
        }
        self.index = entries
        var pending: [Pending] = []
        for change in try fields.objects("pending") {
            let id = try change.string("id")
            try EntityKey.validate(id)
            let ccid = try change.string("ccid")
            try ChangeID.validate(ccid)
            pending.append(Pending(id: id, sourceVersion: try change.optionalVersion("sv"), ccid: ccid))
        }
        self.pending = pending
        self.extra = try fields.optionalObject("extra")
    }

    /// The compact JSON payload.
    public func renderPayload() -> String {
        var json = OrderedJSONObject()
        json.addIfPresent("current", string: current)
        json.add("index", raw: renderedArray(index.map { $0.renderedJSON() }))
        json.add("pending", raw: renderedArray(pending.map { change in
            var item = OrderedJSONObject()
            item.add("id", string: change.id)
            item.addIfPresent("sv", int: change.sourceVersion)
            item.add("ccid", string: change.ccid)
            return item.rendered()
        }))
        json.addIfPresent("extra", object: extra)
        return json.rendered()
    }
}
