import JSONDiff
import TelepatProtocol
import Testing

/// Engine.IO 3 polling payloads as engine.io-parser 1.x frames them (socket.io-client 1.x, the
/// Telepat JS SDK's), and channel keys as the SDK builds them (issue 36).
@Suite struct PayloadAndChannelKeyTests {
    @Test func textFramingCountsUTF8BytesAndSendsThemAsCharacters() throws {
        // ASCII: `<length>:<packet>` each.
        #expect(EngineIOPayload.render(["0{}", "40"], framing: .text) == Array("3:0{}2:40".utf8))
        // "4é" is 3 UTF-8 bytes (34 C3 A9); each byte a character, that character as UTF-8.
        #expect(EngineIOPayload.render(["4é"], framing: .text) == Array("3:".utf8) + [0x34, 0xC3, 0x83, 0xC2, 0xA9])
        #expect(try EngineIOPayload.parse(EngineIOPayload.render(["4é😀", "2", "3probe"], framing: .text)) == ["4é😀", "2", "3probe"])
        // A packet sent once-encoded (engine.io-parser 2.x; the length counts UTF-16 units) reads too.
        #expect(try EngineIOPayload.parse(Array("4:4é😀1:2".utf8)) == ["4é😀", "2"])
    }

    @Test func binaryFramingHasATypeByteDigitBytesAndAnEnd() throws {
        #expect(EngineIOPayload.render(["40"], framing: .binary) == [0, 2, 0xFF, 0x34, 0x30])
        let long = "4" + String(repeating: "x", count: 11)
        #expect(EngineIOPayload.render([long, "4é"], framing: .binary) == [0, 1, 2, 0xFF] + Array(long.utf8) + [0, 3, 0xFF, 0x34, 0xC3, 0xA9])
        #expect(try EngineIOPayload.parse(EngineIOPayload.render(["0{}", "4é😀", "6"], framing: .binary)) == ["0{}", "4é😀", "6"])
        #expect(try EngineIOPayload.parse([]) == [])
    }

    @Test func malformedPayloadsAreRefused() {
        for body: [UInt8] in [
            Array("x:40".utf8), Array("5:40".utf8), Array("2".utf8), Array(":40".utf8),
            [0, 5, 0xFF, 0x34], [1, 1, 0xFF, 0x34], [0, 1], [0, 0xFF, 0x34], [0, 12, 0xFF, 0x34], [0, 1, 0xFF, 0xC3],
        ] {
            #expect(throws: TelepatProtocolError.self, "\(body)") { _ = try EngineIOPayload.parse(body) }
        }
    }

    /// The expected text is what Node's `JSON.stringify(JSON.parse(text))` printed for it.
    @Test func javaScriptStringifyKeepsMemberOrderAndWritesAsJavaScriptDoes() throws {
        let text = #"""
            {"b" : 1, "a":[1.0, 2.50, 1e21, 1E-7, -0, 0.1, 123456789012345678901234, 100, 1.5e300, 0.000001, 5e-324, 12345678901234567890, 1e400],
             "s":"é\u00e9\/\n\u0001\ud83d\ude00\u2028\"\\\t", "a2":1, "b":{"z":null,"y":true,"x":false}, "e":{}, "l":[ ], "lone":"\ud800x"}
            """#
        let node = #"{"b":{"z":null,"y":true,"x":false},"a":[1,2.5,1e+21,1e-7,0,0.1,1.2345678901234569e+23,100,1.5e+300,0.000001,5e-324,12345678901234567000,null],"s":"éé/\n\u0001😀"#
            + "\u{2028}" + #"\"\\\t","a2":1,"e":{},"l":[],"lone":"\ud800x"}"#
        #expect(try JavaScriptJSON.stringify(Array(text.utf8)) == node)
        #expect(try JavaScriptJSON.member("l", of: Array(text.utf8)) == "[]")
        #expect(try JavaScriptJSON.member("missing", of: Array(text.utf8)) == nil)
        for bad in [#"{"a":}"#, #"{"a":1"#, "[01]", #"{"a":"\x"}"#, "{\"a\":\"\u{1}\"}", "1 2", "[1,]"] {
            #expect(throws: TelepatProtocolError.self, "\(bad)") { _ = try JavaScriptJSON.stringify(Array(bad.utf8)) }
        }
    }

    /// telepat-js 0.4.8 `Monitor.subscriptionKeyForOptions`: context (unless one object), parent,
    /// user, model, id, then `:filter:` + base64 of `JSON.stringify(filters)`.
    @Test func channelKeysAreTheSDKs() throws {
        let plain = TelepatChannel(context: "c1", model: "task")
        #expect(plain.subscriptionKey(applicationID: "app") == "blg:app:context:c1:task")
        #expect(TelepatChannel(context: "c1", model: "task", id: "o1").subscriptionKey(applicationID: "app") == "blg:app:task:o1")
        #expect(TelepatChannel(context: "c1", model: "comment", parent: .init(id: "p1", model: "task"), user: "u1").subscriptionKey(applicationID: "app")
            == "blg:app:context:c1:task:p1:users:u1:comment")
        // The body as a client sent it (spaces, members out of order): the key is the text
        // `JSON.stringify` made of the filters before they were sent (Node's base64 of it).
        let body = #"{"channel": {"model": "task", "context": "c1"}, "filters": {"and": [{"is": {"status": "open"}}, {"range": {"priority": {"lte": 3, "gte": 1}}}]}}"#
        let request = try SubscribeRequest(parsing: Array(body.utf8))
        #expect(request.filtersText == #"{"and":[{"is":{"status":"open"}},{"range":{"priority":{"lte":3,"gte":1}}}]}"#)
        #expect(request.subscriptionKey(applicationID: "app")
            == "blg:app:context:c1:task:filter:eyJhbmQiOlt7ImlzIjp7InN0YXR1cyI6Im9wZW4ifX0seyJyYW5nZSI6eyJwcmlvcml0eSI6eyJsdGUiOjMsImd0ZSI6MX19fV19")
        let unsubscribe = try ChannelRequest(parsing: Array(body.utf8))
        #expect(unsubscribe.subscriptionKey(applicationID: "app") == request.subscriptionKey(applicationID: "app"))
        // Non-ASCII filters: base64 of their UTF-8.
        let accented = try SubscribeRequest(parsing: Array(#"{"channel":{"context":"c1","model":"task"},"filters":{"is":{"title":"é"}}}"#.utf8))
        #expect(accented.subscriptionKey(applicationID: "app") == "blg:app:context:c1:task:filter:eyJpcyI6eyJ0aXRsZSI6IsOpIn19")
        // No filters (or null): the plain channel.
        #expect(try SubscribeRequest(parsing: Array(#"{"channel":{"context":"c1","model":"task"},"filters":null}"#.utf8))
            .subscriptionKey(applicationID: "app") == "blg:app:context:c1:task")
    }
}
