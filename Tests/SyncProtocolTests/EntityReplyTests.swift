import JSONDiff
@testable import SyncProtocol
import Testing

/// Issue 17: bucketfs's server adds `accepted_at` to `e` replies, and (issue 34) the `ccid` of
/// the change that made the version; other servers do not.
struct EntityReplyTests {
    @Test func theAcceptanceTimeRoundTripsBesideTheData() throws {
        let frame = "0:e:doc.2\n{\"data\":{\"n\":1},\"accepted_at\":1764072000.5}"
        let message = try ServerMessage.parse(frame)
        #expect(message == .channel(0, .entity(key: "doc", version: 2, .data(["n": 1], acceptedAt: 1_764_072_000.5))))
        #expect(try ServerMessage.parse(message.render()) == message)
    }

    @Test func theMakingChangeRoundTripsBesideTheData() throws {
        let frame = "0:e:doc.2\n{\"data\":{\"n\":1},\"accepted_at\":1764072000.5,\"ccid\":\"abc\"}"
        let message = try ServerMessage.parse(frame)
        #expect(message == .channel(0, .entity(key: "doc", version: 2, .data(["n": 1], acceptedAt: 1_764_072_000.5, ccid: "abc"))))
        #expect(message.render() == frame)
        // One that is not a string is not ours to read: the data still counts.
        #expect(
            try ServerMessage.parse("0:e:doc.2\n{\"data\":{\"n\":1},\"ccid\":7}") == .channel(0, .entity(key: "doc", version: 2, .data(["n": 1]))))
    }

    @Test func aReplyWithoutItOrWithOneNotANumberStillCarriesTheData() throws {
        #expect(try ServerMessage.parse("0:e:doc.2\n{\"data\":{\"n\":1}}") == .channel(0, .entity(key: "doc", version: 2, .data(["n": 1]))))
        #expect(
            try ServerMessage.parse("0:e:doc.2\n{\"data\":{\"n\":1},\"accepted_at\":\"yesterday\"}")
                == .channel(0, .entity(key: "doc", version: 2, .data(["n": 1]))))
        #expect(
            try ServerMessage.parse("0:e:doc.2\n{\"data\":{\"n\":1},\"accepted_at\":1764072000}")
                == .channel(0, .entity(key: "doc", version: 2, .data(["n": 1], acceptedAt: 1_764_072_000))))
    }
}
