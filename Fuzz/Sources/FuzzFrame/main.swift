#if canImport(Glibc)
import Glibc
#endif
import FuzzDriver
import SyncProtocol

/// Every frame either side can receive: arbitrary text through the client's and the server's
/// message parsers (channel prefix, command, payload JSON). A refusal is a ProtocolError; what
/// parses must render without trapping.
func fuzzFrame(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    guard let data else { return 0 }
    let text = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    _ = try? Frame.parse(text)
    _ = try? Frame.parse(text, maxBytes: 64)
    if let message = try? ClientMessage.parse(text) {
        _ = message.render()
    }
    if let message = try? ServerMessage.parse(text) {
        _ = message.render()
    }
    return 0
}

exit(bucketfs_fuzz_main(CommandLine.argc, CommandLine.unsafeArgv, fuzzFrame))
