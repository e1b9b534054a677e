import JSONDiff

/// The server's `i` reply: one page of the bucket index (spec "Index: i").
public struct IndexPage: Hashable, Sendable {
    /// One entity in the index.
    public struct Entry: Hashable, Sendable {
        /// The entity key.
        public var id: String
        /// The entity's current version.
        public var version: Int
        /// The entity data, when the request asked for it (`i:1:...`).
        public var data: JSONObject?

        /// An entry from its fields.
        public init(id: String, version: Int, data: JSONObject? = nil) {
            self.id = id
            self.version = version
            self.data = data
        }
    }

    /// The bucket's change version when the page was made.
    public var current: String
    /// The entries of this page.
    public var index: [Entry]
    /// The cursor for the next page; absent on the last page.
    public var mark: String?

    /// A page from its fields.
    public init(current: String, index: [Entry], mark: String? = nil) {
        self.current = current
        self.index = index
        self.mark = mark
    }

    /// Parses the JSON payload of the server's `i`.
    public init(payload: String) throws(ProtocolError) {
        let fields = try JSONFields(parsing: payload, field: "i")
        self.current = try fields.string("current")
        self.mark = try fields.optionalString("mark")
        var entries: [Entry] = []
        for entry in try fields.objects("index") {
            let id = try entry.string("id")
            if !EntityKey.isAcceptableFromServer(id) { throw .invalidKey(excerpt(id)) }
            entries.append(Entry(id: id, version: try entry.version("v"), data: try entry.optionalObject("d")))
        }
        self.index = entries
    }

    /// The compact JSON payload.
    public func renderPayload() -> String {
        var json = OrderedJSONObject()
        json.add("current", string: current)
        json.add("index", raw: renderedArray(index.map { $0.renderedJSON() }))
        json.addIfPresent("mark", string: mark)
        return json.rendered()
    }
}

extension IndexPage.Entry {
    /// `{"id":..,"v":..[,"d":..]}`, shared by the server's page and the client's local index.
    func renderedJSON() -> String {
        var item = OrderedJSONObject()
        item.add("id", string: id)
        item.add("v", int: version)
        item.addIfPresent("d", object: data)
        return item.rendered()
    }
}
