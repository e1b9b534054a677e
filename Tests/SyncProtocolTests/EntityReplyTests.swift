import JSONDiff
@testable import SyncProtocol
import Testing

/// Issue 17: bucketfs's server adds `accepted_at` to `e` replies; other servers do not.
struct EntityReplyTests {
    @Test func theAcceptanceTimeRoundTripsBesideTheData() throws {
        let frame = "0:e:doc.2\n{\"data\":{\"n\":1},\"accepted_at\":1764072000.5}"
        let message = try ServerMessage.parse(frame)
        #expect(message == .channel(0, .entity(key: "doc", version: 2, .data(["n": 1], acceptedAt: 1_764_072_000.5))))
        #expect(try ServerMessage.parse(message.render()) == message)
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
