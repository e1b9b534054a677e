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

    @Test func changesArePackedIntoFramesWithinALimit() throws {
        let changes = (0..<7).map { index in
            ChangeRequest(id: "n\(index)", operation: .modify, diff: ["t": .stringDelta("+" + String(repeating: "z", count: 10 * index))], ccid: "c\(index)")
        }
        let oneFrame = ClientMessage.channel(2, .changes(changes)).render()
        // Unlimited: the one frame a plain render makes.
        #expect(ChangeRequest.frames(changes, channel: 2, maxBytes: .max).frames == [oneFrame])
        // The largest change alone makes a frame of exactly the smallest limit tried.
        let largest = ClientMessage.channel(2, .changes([changes[6]])).render().utf8.count
        for limit in [largest, 200, 300, oneFrame.utf8.count - 1, oneFrame.utf8.count] {
            let packed = ChangeRequest.frames(changes, channel: 2, maxBytes: limit)
            #expect(packed.tooLarge.isEmpty)
            #expect(packed.frames.allSatisfy { $0.utf8.count <= limit }, "limit \(limit)")
            // Every change, once, in order; and a frame ends only where the next change did not fit.
            let perFrame = try packed.frames.map { frame -> [ChangeRequest] in
                guard case .channel(2, .changes(let requests)) = try ClientMessage.parse(frame) else { return [] }
                return requests
            }
            #expect(perFrame.flatMap { $0 } == changes, "limit \(limit)")
            for (frame, next) in zip(perFrame, perFrame.dropFirst()) {
                #expect(ClientMessage.channel(2, .changes(frame + [next[0]])).render().utf8.count > limit)
            }
        }
        // A change that alone makes a frame over the limit is left out, with that frame's size.
        let packed = ChangeRequest.frames(changes, channel: 2, maxBytes: largest - 1)
        #expect(packed.tooLarge.map(\.change) == [changes[6]])
        #expect(packed.tooLarge.map(\.frameBytes) == [largest])
        let sent = try packed.frames.flatMap { frame -> [ChangeRequest] in
            guard case .channel(2, .changes(let requests)) = try ClientMessage.parse(frame) else { return [] }
            return requests
        }
        #expect(sent == Array(changes.prefix(6)))
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
