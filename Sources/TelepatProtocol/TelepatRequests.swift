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

    /// The channel's key, as the SDK names it (telepat-js 0.4 `Monitor.subscriptionKeyForOptions`)
    /// and looks notifications up by: `blg:<app>`, `:context:<context>` (unless the channel is
    /// one object), `:<parent model>:<parent id>`, `:users:<user>`, `:<model>`, `:<id>`, and for
    /// a filtered channel `:filter:` + base64 of its filters' `JSON.stringify` text
    /// (`JavaScriptJSON`). A filtered channel is a channel of its own.
    public func subscriptionKey(applicationID: String, filters: String? = nil) -> String {
        var key = "blg:\(applicationID)"
        if id == nil { key += ":context:\(context)" }
        if let parent { key += ":\(parent.model):\(parent.id)" }
        if let user { key += ":users:\(user)" }
        key += ":\(model)"
        if let id { key += ":\(id)" }
        if let filters { key += ":filter:" + Base64.encode(Array(filters.utf8)) }
        return key
    }

    /// Whether `object` (of this channel's context and model) falls within the channel.
    public func contains(_ object: JSONObject) -> Bool {
        if let id, object["id"] != .string(id) { return false }
        if let user, object["user_id"] != .string(user) { return false }
        if let parent, object[JSONKey("\(parent.model)_id")] != .string(parent.id) { return false }
        return true
    }
}

/// A value's `JSON.stringify` text, for a request made here (its members in the renderer's order,
/// which is also the order its body is sent in).
private func javaScriptText(_ value: JSONValue) -> String {
    (try? JavaScriptJSON.stringify(value.compactRenderedBytes())) ?? value.compactRendered()
}

/// Standard base64 with padding (Node's `Buffer.toString('base64')`).
enum Base64 {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)

    static func encode(_ bytes: [UInt8]) -> String {
        var out: [UInt8] = []
        out.reserveCapacity((bytes.count + 2) / 3 * 4)
        var index = 0
        while index < bytes.count {
            let a = bytes[index]
            let b = index + 1 < bytes.count ? bytes[index + 1] : 0
            let c = index + 2 < bytes.count ? bytes[index + 2] : 0
            out.append(alphabet[Int(a >> 2)])
            out.append(alphabet[Int((a & 0x03) << 4 | b >> 4)])
            out.append(index + 1 < bytes.count ? alphabet[Int((b & 0x0F) << 2 | c >> 6)] : UInt8(ascii: "="))
            out.append(index + 2 < bytes.count ? alphabet[Int(c & 0x3F)] : UInt8(ascii: "="))
            index += 3
        }
        return String(decoding: out, as: UTF8.self)
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
    /// The filters as the client's `JSON.stringify` wrote them (member order kept): the filtered
    /// channel's name (`TelepatChannel.subscriptionKey`).
    public var filtersText: String?
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
        self.filtersText = filters.map(javaScriptText)
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
        if filters != nil { filtersText = try JavaScriptJSON.member("filters", of: body) }
    }

    /// The channel's key (with its filters, if any).
    public func subscriptionKey(applicationID: String) -> String {
        channel.subscriptionKey(applicationID: applicationID, filters: filtersText)
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
    /// As `SubscribeRequest.filtersText`: an unsubscribe names the filtered channel it leaves.
    public var filtersText: String?

    public init(channel: TelepatChannel, filters: JSONValue? = nil) {
        self.channel = channel
        self.filters = filters
        self.filtersText = filters.map(javaScriptText)
    }

    public init(parsing body: some Collection<UInt8>) throws(TelepatProtocolError) {
        let fields = try requestFields(body)
        self.init(channel: try TelepatChannel(fields: fields), filters: fields.present("filters"))
        if filters != nil { filtersText = try JavaScriptJSON.member("filters", of: body) }
    }

    /// The channel's key (with its filters, if any).
    public func subscriptionKey(applicationID: String) -> String {
        channel.subscriptionKey(applicationID: applicationID, filters: filtersText)
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
