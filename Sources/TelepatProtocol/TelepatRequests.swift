import JSONDiff

/// Parses a request body: a JSON object (an empty body reads as `{}`).
func requestFields(_ body: some Collection<UInt8>) throws(TelepatProtocolError) -> TelepatFields {
    guard body.contains(where: { !($0 == 0x20 || $0 == 0x0A || $0 == 0x0D || $0 == 0x09) }) else {
        return try TelepatFields(.object([:]), field: "body")
    }
    return try TelepatFields(parseTelepatJSON(body), field: "body")
}

/// What a subscription is about: the objects of one model in one context (optionally one
/// object, or those of a parent or a user).
public struct TelepatChannel: Hashable, Sendable {
    public struct Parent: Hashable, Sendable {
        public var id: String
        public var model: String

        public init(id: String, model: String) {
            self.id = id
            self.model = model
        }
    }

    public var context: String
    public var model: String
    public var id: String?
    public var parent: Parent?
    public var user: String?

    public init(context: String, model: String, id: String? = nil, parent: Parent? = nil, user: String? = nil) {
        self.context = context
        self.model = model
        self.id = id
        self.parent = parent
        self.user = user
    }

    init(fields: TelepatFields) throws(TelepatProtocolError) {
        let channel = try TelepatFields(.object(fields.object(("channel"))), field: "channel")
        var parent: Parent?
        if let object = try channel.optionalObject("parent") {
            let parentFields = try TelepatFields(.object(object), field: "parent")
            parent = Parent(id: try parentFields.name("id"), model: try parentFields.name("model"))
        }
        self.init(
            context: try channel.name("context"), model: try channel.name("model"),
            id: try channel.optionalIdentifier("id"), parent: parent, user: try channel.optionalIdentifier("user")
        )
    }

    public var json: JSONValue {
        var object: JSONObject = ["context": .string(context), "model": .string(model)]
        if let id { object["id"] = .string(id) }
        if let parent { object["parent"] = .object(["id": .string(parent.id), "model": .string(parent.model)]) }
        if let user { object["user"] = .string(user) }
        return .object(object)
    }

    /// The subscription name notifications carry (`blg:<app>:context:<context>:<model>`, and
    /// the narrower forms for one object, a parent or a user).
    public func subscriptionKey(applicationID: String) -> String {
        if let id { return "blg:\(applicationID):\(model):\(id)" }
        var key = "blg:\(applicationID):context:\(context)"
        if let user { key += ":users:\(user)" }
        if let parent { key += ":\(parent.model):\(parent.id)" }
        return key + ":\(model)"
    }

    /// Whether `object` (of this channel's context and model) falls within the channel.
    public func contains(_ object: JSONObject) -> Bool {
        if let id, object["id"] != .string(id) { return false }
        if let user, object["user_id"] != .string(user) { return false }
        if let parent, object[JSONKey("\(parent.model)_id")] != .string(parent.id) { return false }
        return true
    }
}

/// `POST /device/register`.
public struct DeviceRegistration: Hashable, Sendable {
    public var info: JSONObject
    public var persistent: JSONObject?

    public init(info: JSONObject, persistent: JSONObject? = nil) {
        self.info = info
        self.persistent = persistent
    }

    public init(parsing body: some Collection<UInt8>) throws(TelepatProtocolError) {
        let fields = try requestFields(body)
        let info = try fields.object("info")
        if let udid = info[JSONKey("udid")], udid != .null, udid.stringValue == nil {
            throw .wrongType(field: "info.udid", expected: "a string")
        }
        self.init(info: info, persistent: try fields.optionalObject("persistent"))
    }

    /// The device's own identifier (`info.udid`), when it has one.
    public var udid: String? {
        guard case .string(let udid)? = info[JSONKey("udid")], !udid.isEmpty else { return nil }
        return udid
    }

    public var json: JSONValue {
        .object(JSONObject().setting("info", .object(info)).setting("persistent", persistent.map { .object($0) }))
    }
}

/// `POST /user/register-username` and `/user/login-password`: a username, a password, and for
/// a registration any other profile fields (kept as given).
public struct UserCredentialsRequest: Hashable, Sendable {
    public var username: String
    public var password: String
    public var profile: JSONObject

    public init(username: String, password: String, profile: JSONObject = [:]) {
        self.username = username
        self.password = password
        self.profile = profile
    }

    public init(parsing body: some Collection<UInt8>) throws(TelepatProtocolError) {
        let fields = try requestFields(body)
        var profile = fields.object
        profile["username"] = nil
        profile["password"] = nil
        self.init(username: try fields.name("username"), password: try fields.name("password"), profile: profile)
    }

    public var json: JSONValue {
        var object = profile
        object["username"] = .string(username)
        object["password"] = .string(password)
        return .object(object)
    }
}

/// `POST /object/subscribe`.
public struct SubscribeRequest: Hashable, Sendable {
    public var channel: TelepatChannel
    public var filters: JSONValue?
    public var sort: JSONValue?
    public var offset: Int?
    public var limit: Int?
    /// Only read the objects; do not send this channel's notifications to the device.
    public var noSubscribe: Bool

    public init(
        channel: TelepatChannel, filters: JSONValue? = nil, sort: JSONValue? = nil, offset: Int? = nil, limit: Int? = nil,
        noSubscribe: Bool = false
    ) {
        self.channel = channel
        self.filters = filters
        self.sort = sort
        self.offset = offset
        self.limit = limit
        self.noSubscribe = noSubscribe
    }

    public init(parsing body: some Collection<UInt8>) throws(TelepatProtocolError) {
        let fields = try requestFields(body)
        self.init(
            channel: try TelepatChannel(fields: fields), filters: fields.present("filters"), sort: fields.present("sort"),
            offset: try fields.optionalCount("offset"), limit: try fields.optionalCount("limit"),
            noSubscribe: try fields.flag("no_subscribe")
        )
    }

    public var json: JSONValue {
        var object: JSONObject = ["channel": channel.json]
        object = object.setting("filters", filters).setting("sort", sort)
            .setting("offset", offset.map { .integer(Int64($0)) }).setting("limit", limit.map { .integer(Int64($0)) })
        if noSubscribe { object["no_subscribe"] = .bool(true) }
        return .object(object)
    }
}

/// `POST /object/unsubscribe` and `/object/count`: a channel (and for a count, filters).
public struct ChannelRequest: Hashable, Sendable {
    public var channel: TelepatChannel
    public var filters: JSONValue?

    public init(channel: TelepatChannel, filters: JSONValue? = nil) {
        self.channel = channel
        self.filters = filters
    }

    public init(parsing body: some Collection<UInt8>) throws(TelepatProtocolError) {
        let fields = try requestFields(body)
        self.init(channel: try TelepatChannel(fields: fields), filters: fields.present("filters"))
    }

    public var json: JSONValue {
        .object(JSONObject().setting("channel", channel.json).setting("filters", filters))
    }
}

/// `POST /object/create`.
public struct CreateRequest: Hashable, Sendable {
    public var context: String
    public var model: String
    public var content: JSONObject

    public init(context: String, model: String, content: JSONObject) {
        self.context = context
        self.model = model
        self.content = content
    }

    public init(parsing body: some Collection<UInt8>) throws(TelepatProtocolError) {
        let fields = try requestFields(body)
        self.init(context: try fields.name("context"), model: try fields.name("model"), content: try fields.object("content"))
    }

    public var json: JSONValue {
        .object(["context": .string(context), "model": .string(model), "content": .object(content)])
    }
}

/// `POST /object/update`: patches to one object, each naming it in its path.
public struct UpdateRequest: Hashable, Sendable {
    public var context: String
    public var model: String
    public var id: String
    public var patches: [TelepatPatch]

    public init(context: String, model: String, id: String, patches: [TelepatPatch]) {
        self.context = context
        self.model = model
        self.id = id
        self.patches = patches
    }

    public init(parsing body: some Collection<UInt8>) throws(TelepatProtocolError) {
        let fields = try requestFields(body)
        guard let items = try fields.optionalArray("patches") else { throw .missingField("patches") }
        guard !items.isEmpty else { throw .invalidValue(field: "patches", value: "empty") }
        var patches: [TelepatPatch] = []
        for item in items { patches.append(try TelepatPatch(parsing: item)) }
        let model = try fields.name("model")
        // Real clients name the object in the patch paths only; the body's id is then implied.
        guard let id = try fields.optionalIdentifier("id") ?? patches.first?.path.id else { throw .missingField("id") }
        self.init(context: try fields.name("context"), model: model, id: id, patches: patches)
    }

    public var json: JSONValue {
        .object([
            "context": .string(context), "model": .string(model), "id": .string(id),
            "patches": .array(patches.map(\.json)),
        ])
    }
}

/// `DELETE /object/delete`.
public struct DeleteRequest: Hashable, Sendable {
    public var context: String
    public var model: String
    public var id: String

    public init(context: String, model: String, id: String) {
        self.context = context
        self.model = model
        self.id = id
    }

    public init(parsing body: some Collection<UInt8>) throws(TelepatProtocolError) {
        let fields = try requestFields(body)
        guard let id = try fields.optionalIdentifier("id") else { throw .missingField("id") }
        self.init(context: try fields.name("context"), model: try fields.name("model"), id: id)
    }

    public var json: JSONValue {
        .object(["context": .string(context), "model": .string(model), "id": .string(id)])
    }
}
