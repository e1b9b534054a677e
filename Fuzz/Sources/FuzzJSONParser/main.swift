#if canImport(Glibc)
import Glibc
#endif
import FuzzDriver
import JSONDiff

/// The JSON parser on arbitrary bytes: it either refuses them with a JSONParseError or gives a
/// value whose renderings parse back to the same value (keys and strings carried exactly).
func fuzzJSONParser(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    guard let data else { return 0 }
    let bytes = UnsafeBufferPointer(start: data, count: size)
    guard let value = try? JSONValue(parsing: bytes) else { return 0 }
    for rendered in [value.compactRendered(), value.prettyRendered()] {
        guard let again = try? JSONValue(parsing: rendered) else {
            fatalError("rendered value does not parse: \(rendered.debugDescription)")
        }
        // Doubles may not round-trip bit for bit through text (NaN never parses anyway); the
        // rendering of the re-parsed value must then be stable.
        if again != value, again.compactRendered() != value.compactRendered() {
            fatalError("round trip changed the value: \(rendered.debugDescription)")
        }
    }
    return 0
}

exit(bucketfs_fuzz_main(CommandLine.argc, CommandLine.unsafeArgv, fuzzJSONParser))
