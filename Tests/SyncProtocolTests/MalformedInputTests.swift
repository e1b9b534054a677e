import JSONDiff
import Testing
@testable import SyncProtocol

/// Every way a frame can be wrong gives its typed error, never a crash.
@Suite struct MalformedInputTests {
    private func clientError(_ text: String) -> ProtocolError? {
        protocolError { () throws(ProtocolError) in try ClientMessage.parse(text) }
    }

    private func serverError(_ text: String) -> ProtocolError? {
        protocolError { () throws(ProtocolError) in try ServerMessage.parse(text) }
    }

    @Test func frameLevelErrorsInBothDirections() {
        for parse in [clientError, serverError] {
            #expect(parse("") == .emptyFrame)
            #expect(parse("0:zap:1") == .unknownCommand("zap"))
            #expect(parse("x:c:[]") == .badChannel("x"))
            #expect(parse("0") == .missingCommand)
        }
        #expect(protocolError { () throws(ProtocolError) in try ClientMessage.parse("0:cv:abcdef", maxBytes: 8) } == .frameTooLarge(limit: 8))
        #expect(protocolError { () throws(ProtocolError) in try ServerMessage.parse("0:cv:?", maxBytes: 5) } == .frameTooLarge(limit: 5))
    }

    @Test func channelRules() {
        #expect(clientError("0:h:1") == .channelNotAllowed(.heartbeat))
        #expect(clientError("0:log:{}") == .channelNotAllowed(.log))
        #expect(serverError("1:log:1") == .channelNotAllowed(.log))
        #expect(clientError("cv:abc") == .channelRequired(.changeVersion))
        #expect(clientError("init:{}") == .channelRequired(.initialize))
        #expect(serverError("auth:x@y") == .channelRequired(.auth))
        #expect(serverError("index") == .channelRequired(.remoteIndex))
    }

    @Test func commandsInTheWrongDirection() {
        #expect(clientError("0:auth:me@example.com") == .unexpectedCommand(.auth))
        #expect(serverError(#"0:init:{"name":"n","token":"t"}"#) == .unexpectedCommand(.initialize))
    }

    @Test func missingPayloads() {
        for command in ["init", "i", "e", "cv", "c", "index"] {
            #expect(clientError("0:\(command)") == .missingPayload(Command(rawValue: command)!))
            #expect(clientError("0:\(command):") == .missingPayload(Command(rawValue: command)!))
        }
        for command in ["auth", "i", "e", "cv", "c"] {
            #expect(serverError("0:\(command)") == .missingPayload(Command(rawValue: command)!))
        }
        #expect(clientError("h") == .missingPayload(.heartbeat))
        #expect(clientError("h:") == .missingPayload(.heartbeat))
        #expect(serverError("log") == .missingPayload(.log))
        #expect(serverError("0:e:key.1") == .missingPayload(.entity))
        #expect(serverError("0:e:key.1\n") == .missingPayload(.entity))
    }

    @Test func unexpectedPayloads() {
        #expect(serverError("0:index:{}") == .unexpectedPayload(.remoteIndex))
        #expect(serverError("0:cv:abc") == .unexpectedPayload(.changeVersion))
    }

    @Test func numbers() {
        for text in ["h:x", "h:-1", "h:+1", "h:1.0", "h: 1", "h:1234567890123456789"] {
            guard case .invalidValue(field: "h", _)? = clientError(text) else { Issue.record("\(text)"); continue }
        }
        guard case .invalidValue(field: "log", _)? = serverError("log:on") else { Issue.record("log"); return }
    }

    @Test func invalidJSON() {
        for text in ["0:init:{", "0:c:{\"id\":}", "0:index:[1,", "log:{x}", "0:init:nope"] {
            guard case .invalidJSON? = clientError(text) else { Issue.record("\(text)"); continue }
        }
        for text in ["0:i:{\"current\":", "0:c:[{]", "0:e:k.1\n{bad}"] {
            guard case .invalidJSON? = serverError(text) else { Issue.record("\(text)"); continue }
        }
    }

    @Test func wrongPayloadTypes() {
        #expect(clientError("0:init:[]") == .wrongType(field: "init", expected: "a JSON object"))
        #expect(clientError("0:c:5") == .wrongType(field: "c", expected: "a change object or an array of them"))
        #expect(clientError("0:c:[1]") == .wrongType(field: "c", expected: "an array of change objects"))
        #expect(clientError("0:index:\"x\"") == .wrongType(field: "index", expected: "a JSON object"))
        #expect(serverError("0:i:[]") == .wrongType(field: "i", expected: "a JSON object"))
        #expect(serverError("0:c:\"x\"") == .wrongType(field: "c", expected: "an array of changes"))
        #expect(serverError("0:c:[[]]") == .wrongType(field: "c", expected: "an array of change objects"))
        #expect(serverError("0:e:k.1\n[]") == .wrongType(field: "e", expected: "a JSON object"))
        #expect(serverError("0:auth:123") == .wrongType(field: "auth", expected: "a username or an error object"))
        #expect(serverError("0:auth:[\"x\"]") == .wrongType(field: "auth", expected: "a username or an error object"))
    }

    @Test func initFields() {
        #expect(clientError(#"0:init:{"token":"t"}"#) == .missingField("name"))
        #expect(clientError(#"0:init:{"name":"n"}"#) == .missingField("token"))
        #expect(clientError(#"0:init:{"name":"n","token":null}"#) == .missingField("token"))
        #expect(clientError(#"0:init:{"name":1,"token":"t"}"#) == .wrongType(field: "name", expected: "a string"))
        #expect(clientError(#"0:init:{"name":"n","token":"t","api":true}"#) == .wrongType(field: "api", expected: "a string or number"))
        #expect(clientError(#"0:init:{"name":"n","token":"t","clientid":[]}"#) == .wrongType(field: "clientid", expected: "a string"))
        #expect(clientError(#"0:init:{"name":"n","token":"t","cmd":{}}"#) == .wrongType(field: "cmd", expected: "a string"))
    }

    @Test func initIgnoresUnknownFieldsAndKeepsTokenChecksForTheServer() throws {
        let message = try ClientMessage.parse(#"0:init:{"name":"bad name!","token":"short","future":{"x":1},"api":1.1}"#)
        guard case .channel(0, .initialize(let request)) = message else { Issue.record("\(message)"); return }
        #expect(request.name == "bad name!")
        #expect(request.api == "1.1")
        #expect(!BucketName.isValid(request.name))
        #expect(!AccessToken.isWellFormed(request.token))
    }

    @Test func indexRequestFields() {
        #expect(clientError("0:i:::::500") == .wrongFieldCount(.index, expected: 4, actual: 5))
        #expect(clientError("0:i:1:a:b:c:d") == .wrongFieldCount(.index, expected: 4, actual: 5))
        #expect(clientError("0:i:500") == .wrongFieldCount(.index, expected: 4, actual: 1))
        #expect(clientError("0:i:::") == .wrongFieldCount(.index, expected: 4, actual: 3))
        #expect(clientError("0:i:yes:::1") == .invalidValue(field: "data", value: "yes"))
        #expect(clientError("0:i::::ten") == .invalidValue(field: "limit", value: "ten"))
        #expect(clientError("0:i::::-1") == .invalidValue(field: "limit", value: "-1"))
    }

    @Test func indexRequestLenientForms() throws {
        #expect(try ClientMessage.parse("0:i:0:::") == .channel(0, .index(IndexRequest())))
        #expect(try ClientMessage.parse("0:i::m:o:") == .channel(0, .index(IndexRequest(mark: "m", offset: "o"))))
    }

    @Test func entityRequests() throws {
        #expect(clientError("0:e:keyname") == .missingVersion("keyname"))
        #expect(clientError("0:e:key.") == .invalidValue(field: "version", value: ""))
        #expect(clientError("0:e:key.x") == .invalidValue(field: "version", value: "x"))
        #expect(clientError("0:e:key.-1") == .invalidValue(field: "version", value: "-1"))
        #expect(clientError("0:e:.1") == .invalidKey(""))
        #expect(clientError("0:e:bad key.1") == .invalidKey("bad key"))
        #expect(clientError("0:e:a/b.1") == .invalidKey("a/b"))
        // Keys may contain dots: the version follows the LAST dot.
        #expect(try ClientMessage.parse("0:e:v1.2.note.17") == .channel(0, .entity(key: "v1.2.note", version: 17)))
        #expect(try ClientMessage.parse("0:e:a.b.3").render() == "0:e:a.b.3")
    }

    @Test func entityReplies() throws {
        #expect(serverError("0:e:key\n?") == .missingVersion("key"))
        #expect(serverError("0:e:k.1\n{}") == .missingField("data"))
        #expect(serverError("0:e:k.1\n{\"data\":3}") == .wrongType(field: "data", expected: "an object"))
        guard case .invalidJSON? = serverError("0:e:k.1\n??") else { Issue.record("??"); return }
        #expect(serverError("0:e:\u{1}.1\n?") == .invalidKey("\u{1}"))
        #expect(try ServerMessage.parse("0:e:k.1\n{\"data\":null}") == .channel(0, .entity(key: "k", version: 1, .unknown)))
        // Servers may use keys outside the strict client rule; the client still accepts them.
        #expect(try ServerMessage.parse("0:e:a b.1\n?") == .channel(0, .entity(key: "a b", version: 1, .unknown)))
    }

    @Test func changeVersionRequests() {
        #expect(clientError("0:cv:a b") == .invalidValue(field: "cv", value: "a b"))
        #expect(clientError("0:cv:" + String(repeating: "a", count: 257)) == .invalidValue(field: "cv", value: String(repeating: "a", count: 64) + "..."))
    }

    @Test func changeRequestFields() {
        let ok = #""id":"k","o":"M","ccid":"c1","v":{}"#
        #expect(clientError(#"0:c:{"o":"M","ccid":"c1"}"#) == .missingField("id"))
        #expect(clientError(#"0:c:{"id":"k","ccid":"c1"}"#) == .missingField("o"))
        #expect(clientError(#"0:c:{"id":"k","o":"M"}"#) == .missingField("ccid"))
        #expect(clientError(#"0:c:{"id":"k","o":"+","ccid":"c1"}"#) == .invalidValue(field: "o", value: "+"))
        #expect(clientError(#"0:c:{"id":"k k","o":"M","ccid":"c1"}"#) == .invalidKey("k k"))
        #expect(clientError(#"0:c:{"id":"k","o":"M","ccid":"c 1"}"#) == .invalidChangeID("c 1"))
        #expect(clientError(#"0:c:{"id":7,"o":"M","ccid":"c1"}"#) == .wrongType(field: "id", expected: "a string"))
        #expect(clientError("0:c:{\(ok),\"sv\":\"1\"}") == .wrongType(field: "sv", expected: "a non-negative integer"))
        #expect(clientError("0:c:{\(ok),\"sv\":-1}") == .wrongType(field: "sv", expected: "a non-negative integer"))
        #expect(clientError("0:c:{\(ok),\"sv\":1.5}") == .wrongType(field: "sv", expected: "a non-negative integer"))
        #expect(clientError("0:c:{\(ok),\"d\":[]}") == .wrongType(field: "d", expected: "an object"))
        #expect(clientError(#"0:c:{"id":"k","o":"M","ccid":"c1","v":[]}"#) == .wrongType(field: "v", expected: "an object diff"))
        guard case .invalidDiff? = clientError(#"0:c:{"id":"k","o":"M","ccid":"c1","v":{"a":{"o":"?"}}}"#) else {
            Issue.record("bad op should be an invalid diff"); return
        }
        guard case .invalidDiff? = clientError(#"0:c:{"id":"k","o":"M","ccid":"c1","v":{"a":5}}"#) else {
            Issue.record("non-object op should be an invalid diff"); return
        }
    }

    @Test func changeRequestLenience() throws {
        // Integral floats (Python clients) and `null` for optional fields.
        let message = try ClientMessage.parse(#"0:c:{"id":"k","o":"M","ccid":"c1","v":{},"sv":2.0,"d":null,"clientid":null,"extra":1}"#)
        #expect(message == .channel(0, .changes([ChangeRequest(id: "k", operation: .modify, diff: [:], sourceVersion: 2, ccid: "c1")])))
    }

    @Test func serverChangeFields() {
        let base = #""clientid":"x","id":"k","o":"M","v":{},"ev":2,"cv":"c","ccids":["a"]"#
        #expect(serverError(#"0:c:[{"clientid":"x","id":"k","o":"M","ev":2,"cv":"c","ccids":[]}]"#) == .missingField("v"))
        #expect(serverError(#"0:c:[{"clientid":"x","id":"k","o":"M","v":{},"cv":"c","ccids":[]}]"#) == .missingField("ev"))
        #expect(serverError(#"0:c:[{"clientid":"x","id":"k","o":"M","v":{},"ev":2,"ccids":[]}]"#) == .missingField("cv"))
        #expect(serverError(#"0:c:[{"clientid":"x","id":"k","o":"M","v":{},"ev":2,"cv":"c"}]"#) == .missingField("ccids"))
        #expect(serverError("0:c:[{\(base),\"ccids\":[1]}]".replacingOccurrences(#""ccids":["a"],"#, with: "")) == .wrongType(field: "ccids", expected: "an array of strings"))
        #expect(serverError("0:c:[{\(base)}]".replacingOccurrences(#""ev":2"#, with: #""ev":"2""#)) == .wrongType(field: "ev", expected: "a non-negative integer"))
        #expect(serverError("0:c:[{\(base)}]".replacingOccurrences(#""id":"k""#, with: #""id":"""#)) == .invalidKey(""))
        #expect(serverError(#"0:c:[{"id":"k","ccids":["a"],"error":"x"}]"#) == .invalidValue(field: "error", value: "x"))
        #expect(serverError(#"0:c:[{"id":"k","ccids":["a"],"error":true}]"#) == .wrongType(field: "error", expected: "an integer error code"))
        #expect(serverError(#"0:c:[{"id":"k","error":409}]"#) == .missingField("ccids"))
    }

    @Test func serverRemoveNeedsNoDiffOrEndVersion() throws {
        let text = #"0:c:[{"id":"k","o":"-","cv":"c9","ccids":["a"]}]"#
        let change = AppliedChange(clientID: nil, id: "k", operation: .remove, diff: nil, endVersion: nil, changeVersion: "c9", ccids: ["a"])
        #expect(try ServerMessage.parse(text) == .channel(0, .changes([.applied(change)])))
        #expect(try ServerMessage.parse(text).render() == text)
    }

    @Test func authErrors() throws {
        #expect(serverError(#"0:auth:{"msg":"x"}"#) == .missingField("code"))
        #expect(serverError(#"0:auth:{"code":1.5}"#) == .wrongType(field: "code", expected: "an integer"))
        #expect(serverError(#"0:auth:{"code":401,"msg":5}"#) == .wrongType(field: "msg", expected: "a string"))
        #expect(try ServerMessage.parse(#"0:auth:{"code":"400"}"#) == .channel(0, .authError(code: 400, message: "")))
        #expect(serverError("0:auth:a\u{1}b") == .invalidUsername("a\u{1}b"))
    }

    @Test func indexPageFields() {
        #expect(serverError(#"0:i:{"index":[]}"#) == .missingField("current"))
        #expect(serverError(#"0:i:{"current":"c","index":{}}"#) == .wrongType(field: "index", expected: "an array"))
        #expect(serverError(#"0:i:{"current":"c","index":[1]}"#) == .wrongType(field: "index", expected: "an array of objects"))
        #expect(serverError(#"0:i:{"current":"c","index":[{"id":"a"}]}"#) == .missingField("v"))
        #expect(serverError(#"0:i:{"current":"c","index":[{"id":"a","v":1,"d":"x"}]}"#) == .wrongType(field: "d", expected: "an object"))
        #expect(serverError(#"0:i:{"current":"c","index":[],"mark":1}"#) == .wrongType(field: "mark", expected: "a string"))
    }

    @Test func localIndexFields() {
        #expect(clientError(#"0:index:{"index":[{"id":"bad key","v":1}]}"#) == .invalidKey("bad key"))
        #expect(clientError(#"0:index:{"pending":[{"id":"a"}]}"#) == .missingField("ccid"))
        #expect(clientError(#"0:index:{"pending":[{"id":"a","ccid":"c","sv":"1"}]}"#) == .wrongType(field: "sv", expected: "a non-negative integer"))
        #expect(clientError(#"0:index:{"extra":[]}"#) == .wrongType(field: "extra", expected: "an object"))
    }

    @Test func hostileInputNeverCrashes() {
        let samples = [
            "0:c:" + String(repeating: "[", count: 100_000),
            "0:e:" + String(repeating: ".", count: 1_000),
            "0:i:" + String(repeating: ":", count: 1_000),
            "99999999999999999999:c:[]",
            "0:c:[{\"id\":\"k\",\"o\":\"M\",\"ccid\":\"c\",\"sv\":1e300}]",
            "0:c:[{\"id\":\"k\",\"o\":\"M\",\"ccid\":\"c\",\"sv\":123456789012345678901234567890}]",
            "h:99999999999999999999999",
            "\u{0}", "::::", ":", "\n", "0:e:\n\n",
        ]
        for sample in samples {
            _ = try? ClientMessage.parse(sample)
            _ = try? ServerMessage.parse(sample)
        }
    }
}
