import JSONDiff

/// The `init` payload: authorize a channel for one bucket (spec "Authorizing: init").
public struct InitRequest: Hashable, Sendable {
    /// Identifies the client session, e.g. `node-<uuid>` (spec example spells it `client_id`).
    public var clientID: String?
    /// API version; clients send `"1.1"` or a number, kept as text.
    public var api: String?
    /// The user's access token.
    public var token: String
    /// The Simperium app id.
    public var appID: String?
    /// The bucket name.
    public var name: String
    /// The client library name.
    public var library: String?
    /// The client library version.
    public var version: String?
    /// A command to run once authorized, e.g. `i::::500` (see `initialCommand()`).
    public var cmd: String?

    /// A request from its fields.
    public init(
        clientID: String? = nil, api: String? = "1.1", token: String, appID: String? = nil, name: String,
        library: String? = nil, version: String? = nil, cmd: String? = nil
    ) {
        self.clientID = clientID
        self.api = api
        self.token = token
        self.appID = appID
        self.name = name
        self.library = library
        self.version = version
        self.cmd = cmd
    }

    /// Parses the JSON payload of `init`. Token and bucket name are only type-checked here:
    /// their validity is the server's call, answered with an `auth` error code.
    public init(payload: String) throws(ProtocolError) {
        let fields = try JSONFields(parsing: payload, field: "init")
        // The spec's own init example spells it `client_id`; reference clients send `clientid`.
        let clientID = try fields.optionalString("clientid")
        let legacyClientID = try fields.optionalString("client_id")
        self.clientID = clientID ?? legacyClientID
        self.api = try fields.optionalStringOrNumber("api")
        self.token = try fields.string("token")
        self.appID = try fields.optionalString("app_id")
        self.name = try fields.string("name")
        self.library = try fields.optionalString("library")
        self.version = try fields.optionalStringOrNumber("version")
        self.cmd = try fields.optionalString("cmd")
    }

    /// The compact JSON payload.
    public func renderPayload() -> String {
        var json = OrderedJSONObject()
        json.addIfPresent("clientid", string: clientID)
        json.addIfPresent("api", string: api)
        json.add("token", string: token)
        json.addIfPresent("app_id", string: appID)
        json.add("name", string: name)
        json.addIfPresent("library", string: library)
        json.addIfPresent("version", string: version)
        json.addIfPresent("cmd", string: cmd)
        return json.rendered()
    }

    /// The `cmd` field as a channel message, e.g. `i::::500` as an index request; nil if absent.
    public func initialCommand() throws(ProtocolError) -> ChannelClientMessage? {
        guard let cmd else { return nil }
        let frame = try Frame.parse("0:" + cmd)
        return try ChannelClientMessage(command: frame.command, payload: frame.payload)
    }
}
