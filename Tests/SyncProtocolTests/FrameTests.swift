import Testing
@testable import SyncProtocol

@Suite struct FrameTests {
    @Test func splitsChannelCommandAndPayload() throws {
        let frame = try Frame.parse("12:c:[{\"a\":\"x:y\"}]")
        #expect(frame == Frame(channel: 12, command: .changes, payload: "[{\"a\":\"x:y\"}]"))
    }

    @Test func connectionWideFramesHaveNoChannel() throws {
        #expect(try Frame.parse("h:7") == Frame(channel: nil, command: .heartbeat, payload: "7"))
        #expect(try Frame.parse("log:{\"log\":\"a:b\"}") == Frame(channel: nil, command: .log, payload: "{\"log\":\"a:b\"}"))
    }

    @Test func commandWithoutPayload() throws {
        #expect(try Frame.parse("0:index") == Frame(channel: 0, command: .remoteIndex, payload: nil))
        #expect(try Frame.parse("0:index:") == Frame(channel: 0, command: .remoteIndex, payload: ""))
    }

    @Test func payloadKeepsNewlinesAndColons() throws {
        let frame = try Frame.parse("3:e:a.b.4\n{\"data\":{\"t\":\"1:2\"}}")
        #expect(frame.channel == 3)
        #expect(frame.command == .entity)
        #expect(frame.payload == "a.b.4\n{\"data\":{\"t\":\"1:2\"}}")
    }

    @Test func everyCommandRoundTrips() throws {
        for command in Command.allCases {
            for channel in [nil, 0, 5, 999_999_999] as [Int?] {
                for payload in [nil, "", "x", "::", "a\nb"] as [String?] {
                    let frame = Frame(channel: channel, command: command, payload: payload)
                    #expect(try Frame.parse(frame.render()) == frame)
                }
            }
        }
    }

    @Test func renders() {
        #expect(Frame(channel: 0, command: .index, payload: ":::500").render() == "0:i::::500")
        #expect(Frame(channel: nil, command: .heartbeat, payload: "1").render() == "h:1")
        #expect(Frame(channel: 2, command: .remoteIndex, payload: nil).render() == "2:index")
    }

    @Test func emptyFrame() {
        #expect(throws: ProtocolError.emptyFrame) { try Frame.parse("") }
    }

    @Test func oversizedFrame() throws {
        #expect(throws: ProtocolError.frameTooLarge(limit: 10)) { try Frame.parse("0:cv:12345678", maxBytes: 10) }
        // The limit is in UTF-8 bytes, not characters: "é" is two bytes.
        #expect(throws: ProtocolError.frameTooLarge(limit: 7)) { try Frame.parse("0:cv:éé", maxBytes: 7) }
        #expect(try Frame.parse("0:cv:é", maxBytes: 7).payload == "é")
    }

    @Test func badChannels() {
        for text in ["-1:i::::1", "+1:i::::1", "01:i::::1", "1a:i::::1", "x:init:{}", "1234567890:c:[]", " 0:c:[]", "0 :c:[]"] {
            guard case .badChannel? = protocolError({ () throws(ProtocolError) in try Frame.parse(text) }) else {
                Issue.record("\(text) should be a bad channel")
                continue
            }
        }
    }

    @Test func unknownCommands() {
        #expect(throws: ProtocolError.unknownCommand("hello")) { try Frame.parse("hello") }
        #expect(throws: ProtocolError.unknownCommand("x")) { try Frame.parse("x:y") }
        #expect(throws: ProtocolError.unknownCommand("q")) { try Frame.parse("0:q:1") }
        #expect(throws: ProtocolError.unknownCommand("I")) { try Frame.parse("0:I::::1") }
        #expect(throws: ProtocolError.unknownCommand("e\n")) { try Frame.parse("0:e\n") }
    }

    @Test func missingCommand() {
        #expect(throws: ProtocolError.missingCommand) { try Frame.parse("0") }
        #expect(throws: ProtocolError.missingCommand) { try Frame.parse("0:") }
        #expect(throws: ProtocolError.missingCommand) { try Frame.parse("0::x") }
    }

    @Test func errorsQuoteAtMostAShortExcerpt() {
        let long = String(repeating: "z", count: 10_000)
        do {
            _ = try Frame.parse(long)
            Issue.record("parsed")
        } catch {
            #expect(error.description.utf8.count < 120)
        }
    }
}
