/// An event or forum's people (the seed's "Reserved Files"): its author (the account's creator)
/// and the keys its `editors`, `moderators` and `subscribers` files list, 32 bytes each.
struct ApptimistForum: Sendable, Hashable {
    var author: [UInt8]
    var editors: [[UInt8]]
    var moderators: [[UInt8]]
    var subscribers: [[UInt8]]

    /// The forum `account` is, read from `storage`; nil when it is a user's account.
    init?(_ account: ApptimistAccount, storage: any ApptimistStorage) async throws {
        guard let author = account.author else { return nil }
        self.author = author
        editors = try await storage.keys(listedIn: "editors", of: account.publicKey)
        moderators = try await storage.keys(listedIn: "moderators", of: account.publicKey)
        subscribers = try await storage.keys(listedIn: "subscribers", of: account.publicKey)
    }

    /// Who may post to the forum and whom a moderator's message reaches: the author, editors,
    /// moderators and subscribers, each once.
    var members: [[UInt8]] {
        var seen = Set<[UInt8]>()
        return ([author] + editors + moderators + subscribers).filter { seen.insert($0).inserted }
    }

    func isMember(_ key: [UInt8]) -> Bool { members.contains(key) }

    /// Who gets a copy of a member's message: with moderators, a message from someone who is not
    /// one goes to the moderators only; otherwise (a moderator's, or no moderators) to every
    /// member. Never the sender, which has its echo.
    func recipients(ofMessageFrom sender: [UInt8]) -> [[UInt8]] {
        let reached = moderators.isEmpty || moderators.contains(sender) ? members : members.filter { moderators.contains($0) }
        return reached.filter { $0 != sender }
    }
}
