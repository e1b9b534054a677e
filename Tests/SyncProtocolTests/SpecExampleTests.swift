import JSONDiff
import Testing
@testable import SyncProtocol

/// The example frames of spec/simperium-streaming-api.md, copied literally.
@Suite struct SpecExampleTests {
    @Test func initExampleWithSpecSpellings() throws {
        let text = #"0:init:{"api":1,"client_id":"android-1.0","token":"abc123","app_id":"abusers-headset","name":"notes"}"#
        guard case .channel(0, .initialize(let request)) = try ClientMessage.parse(text) else {
            Issue.record("not an init"); return
        }
        #expect(request == InitRequest(clientID: "android-1.0", api: "1", token: "abc123", appID: "abusers-headset", name: "notes"))
        #expect(request.renderPayload() == #"{"clientid":"android-1.0","api":"1","token":"abc123","app_id":"abusers-headset","name":"notes"}"#)
    }

    @Test func initWithCommand() throws {
        let request = try InitRequest(payload: #"{"name":"notes","token":"t","cmd":"i::::500"}"#)
        #expect(try request.initialCommand() == .index(IndexRequest(limit: 500)))
        #expect(try InitRequest(payload: #"{"name":"n","token":"t"}"#).initialCommand() == nil)
        #expect(protocolError { () throws(ProtocolError) in
            try InitRequest(payload: #"{"name":"n","token":"t","cmd":"zz:1"}"#).initialCommand()
        } == .unknownCommand("zz"))
    }

    @Test func authExamples() throws {
        #expect(try ServerMessage.parse(#"0:auth:{"msg":"Token invalid", "code":401}"#)
            == .channel(0, .authError(code: 401, message: "Token invalid")))
        #expect(ServerMessage.channel(0, .authError(code: 401, message: "Token invalid")).render()
            == #"0:auth:{"msg":"Token invalid","code":401}"#)
        let ok = "0:auth:ender@example.com"
        #expect(try ServerMessage.parse(ok) == .channel(0, .authOK(username: "ender@example.com")))
        #expect(try ServerMessage.parse(ok).render() == ok)
    }

    @Test func indexRequestExamplesRenderIdentically() throws {
        let examples: [(String, IndexRequest)] = [
            ("0:i::::500", IndexRequest(limit: 500)),
            ("0:i:1:::500", IndexRequest(includeData: true, limit: 500)),
            ("0:i::::100", IndexRequest(limit: 100)),
            ("0:i::5119450b37a401031d3bfdb9::100", IndexRequest(mark: "5119450b37a401031d3bfdb9", limit: 100)),
            // What node-simperium sends for a next page.
            ("0:i:1:abc::10", IndexRequest(includeData: true, mark: "abc", limit: 10)),
        ]
        for (text, request) in examples {
            #expect(try ClientMessage.parse(text) == .channel(0, .index(request)), "\(text)")
            #expect(ClientMessage.channel(0, .index(request)).render() == text)
        }
    }

    @Test func indexPageExamples() throws {
        // The spec elides entries with `, ... `; the rest is literal.
        let page = #"0:i:{"current": "5119dafb37a401031d47c0f7", "index": [{"id": "one", "v": 2}], "mark": "5119450b37a401031d3bfdb9"}"#
        let expected = IndexPage(current: "5119dafb37a401031d47c0f7", index: [.init(id: "one", version: 2)], mark: "5119450b37a401031d3bfdb9")
        #expect(try ServerMessage.parse(page) == .channel(0, .index(expected)))
        #expect(ServerMessage.channel(0, .index(expected)).render() == compacted(page))

        let withData = #"0:i:{"current": "5119dafb37a401031d47c0f7", "index": [{"id": "one", "v": 2, "d": {"your": "data"}}], "mark": "5119450b37a401031d3bfdb9"}"#
        let dataPage = IndexPage(current: "5119dafb37a401031d47c0f7", index: [.init(id: "one", version: 2, data: ["your": "data"])], mark: "5119450b37a401031d3bfdb9")
        #expect(try ServerMessage.parse(withData) == .channel(0, .index(dataPage)))
        #expect(ServerMessage.channel(0, .index(dataPage)).render() == compacted(withData))

        let last = #"0:i:{"current":"c1","index":[]}"#
        #expect(try ServerMessage.parse(last) == .channel(0, .index(IndexPage(current: "c1", index: []))))
        #expect(try ServerMessage.parse(last).render() == last)
    }

    @Test func entityExamples() throws {
        #expect(try ClientMessage.parse("0:e:keyname.1") == .channel(0, .entity(key: "keyname", version: 1)))
        #expect(ClientMessage.channel(0, .entity(key: "qwerty", version: 2)).render() == "0:e:qwerty.2")
        #expect(try ServerMessage.parse("0:e:keyname.1\n?") == .channel(0, .entity(key: "keyname", version: 1, .unknown)))
        #expect(ServerMessage.channel(0, .entity(key: "keyname", version: 1, .unknown)).render() == "0:e:keyname.1\n?")
        let data = "0:e:keyname.1\n{\"data\": {\"1\": 2, \"0\": 1, \"2\": \"Three\"}}"
        #expect(try ServerMessage.parse(data) == .channel(0, .entity(key: "keyname", version: 1, .data(["0": 1, "1": 2, "2": "Three"]))))
        let hello = "0:e:qwerty.2\n{\"data\":{\"message\":\"hello world\"}}"
        #expect(try ServerMessage.parse(hello).render() == hello)
    }

    @Test func changeVersionExamples() throws {
        for text in ["0:cv:abc123", "0:cv:5119dafb37a401031d47c0f7"] {
            #expect(try ClientMessage.parse(text).render() == text)
        }
        #expect(try ClientMessage.parse("0:cv:abc123") == .channel(0, .changeVersion("abc123")))
        #expect(try ServerMessage.parse("0:cv:?") == .channel(0, .changeVersionUnknown))
        #expect(ServerMessage.channel(0, .changeVersionUnknown).render() == "0:cv:?")
    }

    @Test func changeBroadcastExample() throws {
        let text = #"0:c:[{"clientid": "sjs-2012121301-9af05b4e9a95132f614c", "id": "newobject", "o": "M", "v": {"new": {"o": "+", "v": "object"}}, "ev": 1, "cv": "511aa58737a401031d57db90", "ccids": ["3a5cbd2f0a71fca4933fff5a54d22b60"]}]"#
        let change = AppliedChange(
            clientID: "sjs-2012121301-9af05b4e9a95132f614c", id: "newobject", operation: .modify,
            diff: ["new": .insert("object")], endVersion: 1, changeVersion: "511aa58737a401031d57db90",
            ccids: ["3a5cbd2f0a71fca4933fff5a54d22b60"]
        )
        #expect(try ServerMessage.parse(text) == .channel(0, .changes([.applied(change)])))
        #expect(ServerMessage.channel(0, .changes([.applied(change)])).render() == compacted(text))
        #expect(try ServerMessage.parse("0:c:[]") == .channel(0, .changes([])))
        #expect(ServerMessage.channel(0, .changes([])).render() == "0:c:[]")
    }

    @Test func changeErrorExample() throws {
        // The spec's example has no channel prefix; frames on a bucket need one.
        let text = #"c:[{"clientid":"offending-client","id":"object-key","error":"401","ccids":["abcdef123456"]}]"#
        #expect(protocolError { () throws(ProtocolError) in try ServerMessage.parse(text) } == .channelRequired(.changes))
        let rejection = ChangeRejection(clientID: "offending-client", id: "object-key", ccids: ["abcdef123456"], error: .unauthorized)
        #expect(try ServerMessage.parse("0:" + text) == .channel(0, .changes([.rejected(rejection)])))
        // Rendered the way DESIGN fixes it: error as an integer, after ccids.
        #expect(ServerMessage.channel(0, .changes([.rejected(rejection)])).render()
            == #"0:c:[{"clientid":"offending-client","id":"object-key","ccids":["abcdef123456"],"error":401}]"#)
        #expect(rejection.errorCode == .unauthorized)
    }

    @Test func heartbeatExamples() throws {
        #expect(try ClientMessage.parse("h:0") == .heartbeat(0))
        #expect(try ServerMessage.parse("h:1") == .heartbeat(1))
        #expect(ClientMessage.heartbeat(0).render() == "h:0")
        #expect(ServerMessage.heartbeat(1).render() == "h:1")
    }

    @Test func remoteIndexExamples() throws {
        #expect(try ServerMessage.parse("0:index") == .channel(0, .indexRequest))
        #expect(ServerMessage.channel(0, .indexRequest).render() == "0:index")
        // The spec's reply is pseudo-JSON (`{ current: <cv>, ...}`); this is its JSON form.
        let reply = #"0:index:{"current":"cv1","index":[{"id":"a","v":3}],"pending":[{"id":"a","sv":3,"ccid":"c1"},{"id":"b","ccid":"c2"}],"extra":{"k":1}}"#
        let local = LocalIndex(
            current: "cv1", index: [.init(id: "a", version: 3)],
            pending: [.init(id: "a", sourceVersion: 3, ccid: "c1"), .init(id: "b", sourceVersion: nil, ccid: "c2")],
            extra: ["k": 1]
        )
        #expect(try ClientMessage.parse(reply) == .channel(0, .indexReply(local)))
        #expect(ClientMessage.channel(0, .indexReply(local)).render() == reply)
        #expect(try LocalIndex(payload: "{}") == LocalIndex(current: nil, index: []))
    }

    @Test func remoteLoggingExamples() throws {
        #expect(try ServerMessage.parse("log:1") == .log(level: 1))
        #expect(ServerMessage.log(level: 2).render() == "log:2")
        let record = #"log:{"log":"<some log message>"}"#
        #expect(try ClientMessage.parse(record) == .log(["log": "<some log message>"]))
        #expect(try ClientMessage.parse(record).render() == record)
    }
}
