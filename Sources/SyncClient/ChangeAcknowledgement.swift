/// The server acknowledged a local change: its echo arrived and the store recorded it.
public struct ChangeAcknowledgement: Sendable, Hashable {
    public let bucket: String
    public let key: String
    /// The change id the save was sent with.
    public let ccid: String
    /// The entity's version after the change, when the server said.
    public let version: Int?
}
