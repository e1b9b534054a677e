import Logging

/// The logger a connection's HTTP handling gets: it drops hummingbird-websocket's
/// `error Error handling upgrade result` when the connection failed because this server closed it
/// (a deadline, a refused head: `ConnectionActivity`, which counts and logs those itself).
/// Issue 38: a flood of 2,000 stuck connections wrote 2,000 error lines. Every other message,
/// and that one for a connection the server did not close, goes through unchanged.
struct OwnCloseLogFilter: LogHandler {
    static let upgradeFailure = "Error handling upgrade result"

    var base: any LogHandler
    let activity: ConnectionActivity

    func log(event: LogEvent) {
        if event.level >= .error, activity.closeReason != nil, event.message.description == Self.upgradeFailure { return }
        base.log(event: event)
    }

    var metadataProvider: Logger.MetadataProvider? {
        get { base.metadataProvider }
        set { base.metadataProvider = newValue }
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { base[metadataKey: key] }
        set { base[metadataKey: key] = newValue }
    }

    var metadata: Logger.Metadata {
        get { base.metadata }
        set { base.metadata = newValue }
    }

    var logLevel: Logger.Level {
        get { base.logLevel }
        set { base.logLevel = newValue }
    }
}
