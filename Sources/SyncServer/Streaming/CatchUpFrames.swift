import SyncProtocol

/// The `c` messages answering a `cv` catch-up. Every message the server sends stays within
/// what it accepts from clients (`maxFrameSize`, 4 MiB by default): a catch-up sent as one
/// message however large wedged clients with a message limit for good (closed with 1009, they
/// reconnect and ask for the same catch-up; issue 20). Clients apply each `c` message as it
/// comes, so a catch-up in several messages reads like a catch-up followed by broadcasts.
enum CatchUpFrames {
    /// `changes` in cv order as `<channel>:c:[...]` messages of at most `maxFrameBytes` each
    /// (a single change larger than that is sent alone); `<channel>:c:[]` when up to date.
    static func render(_ changes: [StoredChange], history: UInt64, channel: Int, maxFrameBytes: Int) -> [String] {
        guard !changes.isEmpty else { return [ServerMessage.channel(channel, .changes([])).render()] }
        let single = changes.map { ServerMessage.channel(channel, .changes([.applied($0.applied(history: history))])).render() }
        return Outbox.merged(single, maxMergedBytes: maxFrameBytes)
    }
}
