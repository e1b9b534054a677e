#if canImport(Glibc)
import Glibc
#endif
import FuzzDriver
import JSONDiff
import TelepatProtocol

/// Everything a Telepat server or client parses from a peer: socket frames (Engine.IO, then
/// Socket.IO, then the event), every route's request body, answers, patches, filters and sort. A refusal is a
/// TelepatProtocolError; what parses must render and parse back to the same rendering (doubles
/// may not round-trip bit for bit through text, as in FuzzJSONParser).
func fuzzTelepat(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    guard let data else { return 0 }
    let bytes = UnsafeBufferPointer(start: data, count: size)
    let text = String(decoding: bytes, as: UTF8.self)
    if let packet = try? EngineIOPacket.parse(text) {
        guard (try? EngineIOPacket.parse(packet.render())) == packet else { fatalError("Engine.IO packet round trip") }
    }
    if let packet = try? SocketIOPacket.parse(text), let event = try? TelepatSocketEvent(packet: packet) {
        guard (try? TelepatSocketEvent.parse(frame: event.frame))?.frame == event.frame else { fatalError("socket event round trip") }
    }
    if let request = try? UpdateRequest(parsing: bytes) {
        let rendered = request.json.compactRendered()
        guard (try? UpdateRequest(parsing: Array(rendered.utf8)))?.json.compactRendered() == rendered else {
            fatalError("update round trip")
        }
        _ = try? TelepatObject.applying(request.patches, to: [:], model: request.model, id: request.id, now: 0)
    }
    _ = try? SubscribeRequest(parsing: bytes).json.compactRendered()
    _ = try? CreateRequest(parsing: bytes).json.compactRendered()
    _ = try? DeleteRequest(parsing: bytes)
    _ = try? ChannelRequest(parsing: bytes)
    _ = try? DeviceRegistration(parsing: bytes)
    _ = try? UserCredentialsRequest(parsing: bytes)
    _ = try? TelepatErrorResponse(parsing: bytes)
    if let value = try? JSONValue(parsing: bytes) {
        _ = try? TelepatNotification(parsing: value).json.compactRendered()
        // A subscription's filters and sort, tried on the value itself when it is an object.
        if let filter = try? TelepatFilter(parsing: value) { _ = filter.matches(value.objectValue ?? [:]) }
        if let sort = try? TelepatSort(parsing: value) { _ = sort.sorted([value.objectValue ?? [:], [:]]) }
    }
    return 0
}

exit(bucketfs_fuzz_main(CommandLine.argc, CommandLine.unsafeArgv, fuzzTelepat))
