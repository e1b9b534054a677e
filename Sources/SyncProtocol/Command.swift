/// The commands of the streaming API (spec "Streaming API"), named by what they do.
public enum Command: String, Sendable, Hashable, CaseIterable {
    /// `init`: authorize a channel for a bucket.
    case initialize = "init"
    /// `auth`: the server's answer to `init`.
    case auth
    /// `i`: an index page request or reply.
    case index = "i"
    /// `e`: an entity version request or reply.
    case entity = "e"
    /// `cv`: changes since a change version (or the server's `cv:?`).
    case changeVersion = "cv"
    /// `c`: changes, in either direction.
    case changes = "c"
    /// `index`: the server asking for the client's local state, and the client's answer.
    case remoteIndex = "index"
    /// `h`: heartbeat, connection-wide.
    case heartbeat = "h"
    /// `log`: remote logging, connection-wide.
    case log

    /// Whether the command is connection-wide and never carries a channel prefix.
    public var isConnectionWide: Bool { self == .heartbeat || self == .log }
}
