#if canImport(Glibc)
import Glibc
#endif
import ApptimistProtocol
import FuzzDriver

/// Everything an Apptimist peer parses from the other side before any crypto: the binary frame
/// (both versions' layouts) and the opened header (every PDU type). A refusal is an
/// ApptimistProtocolError; the parsers are strict (every byte accounted for), so what parses must
/// render back to exactly the bytes it came from.
func fuzzApptimist(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    guard let data else { return 0 }
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    for version in ApptimistVersion.allCases {
        if let frame = try? ApptimistFrame.parse(bytes, version: version) {
            guard (try? frame.render(version: version)) == bytes else { fatalError("frame round trip (\(version))") }
        }
        if let header = try? ApptimistHeader.parse(bytes, version: version) {
            guard (try? header.render()) == bytes else { fatalError("header round trip (\(version))") }
        }
    }
    return 0
}

exit(bucketfs_fuzz_main(CommandLine.argc, CommandLine.unsafeArgv, fuzzApptimist))
