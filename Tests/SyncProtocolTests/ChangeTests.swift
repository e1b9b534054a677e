import JSONDiff
import Testing
@testable import SyncProtocol

@Suite struct ChangeTests {
    let first = ChangeRequest(id: "note1", operation: .modify, diff: ["title": .stringDelta("=3\t+x")], sourceVersion: 4, ccid: "aa01")
    let second = ChangeRequest(clientID: "node-1", id: "note2", operation: .remove, ccid: "aa02")

    @Test func singleChangeIsSentAsABareObjectLikeReferenceClients() throws {
        let text = ClientMessage.channel(0, .changes([first])).render()
        #expect(text == #"0:c:{"id":"note1","o":"M","v":{"title":{"o":"d","v":"=3\t+x"}},"sv":4,"ccid":"aa01"}"#)
        #expect(try ClientMessage.parse(text) == .channel(0, .changes([first])))
    }

    @Test func severalChangesAreSentAsAnArray() throws {
        let text = ClientMessage.channel(1, .changes([first, second])).render()
        #expect(text.hasPrefix("1:c:[{"))
        #expect(try ClientMessage.parse(text) == .channel(1, .changes([first, second])))
        #expect(try ClientMessage.parse("1:c:[]") == .channel(1, .changes([])))
        #expect(ClientMessage.channel(1, .changes([])).render() == "1:c:[]")
    }

    @Test func resendWithFullObject() throws {
        var resend = first
        resend.data = ["title": "abcx", "n": 1]
        let text = ClientMessage.channel(0, .changes([resend])).render()
        #expect(text.hasSuffix(#","ccid":"aa01","d":{"n":1,"title":"abcx"}}"#))
        #expect(try ClientMessage.parse(text) == .channel(0, .changes([resend])))
    }

    @Test func outcomesAnswerEachChangeOnItsOwn() throws {
        let payload = #"[{"id":"ok","o":"M","v":{},"ccid":"c1"},{"id":"bad key","o":"M","ccid":"c2","clientid":"cl"},{"id":"k","o":"M","ccid":"c3","v":{"a":{"o":"zz"}}},{"o":"-"}]"#
        let outcomes = try ChangeRequest.outcomes(payload: payload)
        #expect(outcomes.count == 4)
        #expect(outcomes.first == .valid(ChangeRequest(id: "ok", operation: .modify, diff: [:], ccid: "c1")))
        guard outcomes.count == 4,
              case .invalid(let badKey, let keyError) = outcomes[1],
              case .invalid(let badDiff, let diffError) = outcomes[2],
              case .invalid(let noID, let noIDError) = outcomes[3]
        else { Issue.record("\(outcomes)"); return }
        #expect(badKey == ChangeRejection(clientID: "cl", id: "bad key", ccids: ["c2"], error: .invalidRequest))
        #expect(keyError == .invalidKey("bad key"))
        #expect(badDiff == ChangeRejection(clientID: nil, id: "k", ccids: ["c3"], error: .invalidDiff))
        guard case .invalidDiff = diffError else { Issue.record("\(diffError)"); return }
        #expect(noID == ChangeRejection(clientID: nil, id: "", ccids: [], error: .invalidRequest))
        #expect(noIDError == .missingField("id"))
        #expect(try ChangeRequest.outcomes(payload: #"{"id":"a","o":"-","ccid":"c"}"#) == [.valid(ChangeRequest(id: "a", operation: .remove, ccid: "c"))])
        #expect(protocolError { () throws(ProtocolError) in try ChangeRequest.outcomes(payload: "nope") }.map { if case .invalidJSON = $0 { true } else { false } } == true)
    }

    @Test func broadcastWithSourceVersionAndData() throws {
        let change = AppliedChange(
            clientID: "c", id: "k", operation: .modify, diff: ["n": .increment(2)], endVersion: 5, sourceVersion: 4,
            changeVersion: "cv5", ccids: ["x", "y"], data: ["n": 3]
        )
        let text = ServerMessage.channel(2, .changes([.applied(change), .rejected(ChangeRejection(clientID: "c", id: "k", ccids: ["z"], error: .duplicate))])).render()
        #expect(text == #"2:c:[{"clientid":"c","id":"k","o":"M","v":{"n":{"o":"I","v":2}},"ev":5,"sv":4,"cv":"cv5","ccids":["x","y"],"d":{"n":3}},{"clientid":"c","id":"k","ccids":["z"],"error":409}]"#)
        #expect(try ServerMessage.parse(text) == .channel(2, .changes([.applied(change), .rejected(ChangeRejection(clientID: "c", id: "k", ccids: ["z"], code: 409))])))
    }

    @Test func serverChangeAsBareObjectIsAccepted() throws {
        let text = #"0:c:{"id":"k","o":"-","cv":"c","ccids":[]}"#
        #expect(try ServerMessage.parse(text) == .channel(0, .changes([.applied(AppliedChange(clientID: nil, id: "k", operation: .remove, diff: nil, endVersion: nil, changeVersion: "c", ccids: []))])))
    }

    @Test func unknownErrorCodesSurvive() throws {
        let rejection = ChangeRejection(clientID: nil, id: "k", ccids: ["c"], code: 503)
        #expect(rejection.errorCode == .internalError)
        let text = ServerMessage.channel(0, .changes([.rejected(rejection)])).render()
        #expect(text == #"0:c:[{"id":"k","ccids":["c"],"error":503}]"#)
        #expect(try ServerMessage.parse(text) == .channel(0, .changes([.rejected(rejection)])))
    }
}
