import JSONDiff
import Testing
@testable import SyncProtocol

/// Issue 13 on the wire: object keys are distinct by code points, and a lone surrogate is refused
/// as invalid JSON, never carried on as U+FFFD.
@Suite struct UnicodeKeyTests {
    static let rename = #"{"caf\u00e9":{"o":"-"},"cafe\u0301":{"o":"+","v":1}}"#

    @Test func aChangeRenamingBetweenEquivalentKeysKeepsBoth() throws {
        let text = #"0:c:{"id":"n","o":"M","v":"# + Self.rename + #","ccid":"aa"}"#
        guard case .channel(0, .changes(let changes)) = try ClientMessage.parse(text) else {
            Issue.record("not a change")
            return
        }
        let diff = try #require(changes.first?.diff)
        #expect(diff.count == 2)
        let rendered = ClientMessage.channel(0, .changes(changes)).render()
        #expect(rendered.contains("\"caf\u{E9}\":{\"o\":\"-\"}"))
        #expect(rendered.contains("\"cafe\u{301}\":{\"o\":\"+\",\"v\":1}"))
    }

    @Test func aBroadcastRenamingBetweenEquivalentKeysKeepsBoth() throws {
        let text = #"0:c:[{"clientid":"c","id":"n","o":"M","v":"# + Self.rename + #","ev":2,"sv":1,"cv":"cv1","ccids":["aa"]}]"#
        guard case .channel(0, .changes(let changes)) = try ServerMessage.parse(text),
              case .applied(let change)? = changes.first else {
            Issue.record("not an applied change")
            return
        }
        #expect(change.diff?.count == 2)
    }

    @Test func aLoneSurrogateInAChangeIsRefused() throws {
        for text in [#"0:c:{"id":"n","o":"M","v":{"t":{"o":"r","v":"a\ud800b"}},"ccid":"aa"}"#,
                     #"0:c:{"id":"n","o":"M","v":{"t\udc00":{"o":"r","v":"a"}},"ccid":"aa"}"#] {
            let error = protocolError { () throws(ProtocolError) in try ClientMessage.parse(text) }
            guard case .invalidJSON(let reason)? = error else {
                Issue.record("\(String(describing: error))")
                continue
            }
            #expect(reason.contains("lone UTF-16 surrogate"))
        }
    }

    @Test func aServerRefusesEachChangeOfAPayloadWithALoneSurrogateWith400() throws {
        // Not a broken frame but a client's bad text: 400 per change (none applied), no close.
        let payload = #"[{"clientid":"c","id":"n","o":"M","v":{"t":{"o":"r","v":"a\ud800b"}},"ccid":"aa"},{"id":"m","o":"-","ccid":"bb"}]"#
        let outcomes = try ChangeRequest.outcomes(payload: payload)
        #expect(outcomes.count == 2)
        let refused = outcomes.compactMap { outcome -> ChangeRejection? in
            if case .invalid(let rejection, _) = outcome { return rejection }
            return nil
        }
        #expect(refused.map(\.id) == ["n", "m"])
        #expect(refused.map(\.ccids) == [["aa"], ["bb"]])
        #expect(refused.map(\.clientID) == ["c", nil])
        #expect(refused.allSatisfy { $0.code == 400 })
        // Any other text that is not JSON still fails the payload as a whole.
        #expect(protocolError { () throws(ProtocolError) in try ChangeRequest.outcomes(payload: #"[{"id":"n","ccid":"aa""#) } != nil)
        #expect(protocolError { () throws(ProtocolError) in try ChangeRequest.outcomes(payload: #"[{"v":"\ud800"},"#) } != nil)
    }
}
