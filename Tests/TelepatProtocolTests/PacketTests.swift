import JSONDiff
import TelepatProtocol
import Testing

@Suite("Engine.IO and Socket.IO packets")
struct PacketTests {
    @Test func theOpenPacketCarriesTheHandshake() throws {
        let text = #"0{"sid":"abc","upgrades":[],"pingInterval":25000,"pingTimeout":60000}"#
        let packet = try EngineIOPacket.parse(text)
        #expect(packet == .open(EngineIOHandshake(sessionID: "abc", pingInterval: 25000, pingTimeout: 60000)))
        #expect(try EngineIOPacket.parse(packet.render()) == packet)
    }

    @Test(arguments: [
        ("1", EngineIOPacket.close), ("2", .ping("")), ("2probe", .ping("probe")), ("3probe", .pong("probe")),
        ("40", .message("0")), ("5", .upgrade), ("6", .noop),
    ])
    func everyTypeParsesAndRendersBack(text: String, packet: EngineIOPacket) throws {
        #expect(try EngineIOPacket.parse(text) == packet)
        #expect(packet.render() == text)
    }

    @Test(arguments: ["", "7", "x", "0{}", "0{\"sid\":\"a\"}", "0[]", "0{\"sid\":\"\",\"pingInterval\":1,\"pingTimeout\":1}"])
    func malformedEngineIOPacketsAreRefused(text: String) {
        #expect(throws: TelepatProtocolError.self) { try EngineIOPacket.parse(text) }
    }

    @Test func anEventRidesInAMessage() throws {
        let event = try TelepatSocketEvent.parse(frame: #"42["bind_device",{"device_id":"d1","application_id":"app"}]"#)
        #expect(event == .bindDevice(deviceID: "d1", applicationID: "app"))
        #expect(event.frame == #"42["bind_device",{"application_id":"app","device_id":"d1"}]"#)
        #expect(TelepatSocketEvent.ready.frame == #"42["ready",{}]"#)
    }

    @Test func namespaceAndAckIDAreRead() throws {
        let packet = try SocketIOPacket.parse(#"2/chat,17["hello",1]"#)
        #expect(packet.namespace == "/chat")
        #expect(packet.ackID == 17)
        #expect(packet.event?.name == "hello")
        #expect(packet.event?.arguments == [.integer(1)])
        #expect(packet.render() == #"2/chat,17["hello",1]"#)
        let connect = try SocketIOPacket.parse("0")
        #expect(connect.kind == .connect && connect.namespace == "/" && connect.data == nil)
        let binary = try SocketIOPacket.parse(#"51-["up",{"_placeholder":true,"num":0}]"#)
        #expect(binary.attachments == 1 && binary.event?.name == "up")
    }

    @Test(arguments: ["", "9", "a", "2", "2{}", "2[]", "2[1]", "2[\"x\"", "5[\"x\"]", "21234567890[\"x\"]"])
    func malformedSocketIOPacketsAreRefused(text: String) {
        #expect(throws: TelepatProtocolError.self) { try SocketIOPacket.parse(text) }
    }

    @Test func anUnknownEventIsKeptByName() throws {
        let event = try TelepatSocketEvent(packet: SocketIOPacket.parse(#"2["later",{"a":1}]"#))
        #expect(event == .other(name: "later", arguments: [.object(["a": .integer(1)])]))
    }

    @Test func bindDeviceWithoutIdsIsRefused() {
        #expect(throws: TelepatProtocolError.missingField("device_id")) {
            try TelepatSocketEvent.parse(frame: #"42["bind_device",{"application_id":"a"}]"#)
        }
        #expect(throws: TelepatProtocolError.missingField("bind_device data")) {
            try TelepatSocketEvent.parse(frame: #"42["bind_device"]"#)
        }
    }
}
