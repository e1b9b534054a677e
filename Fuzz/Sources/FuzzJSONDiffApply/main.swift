#if canImport(Glibc)
import Glibc
#endif
import FuzzDriver
import JSONDiff

/// jsondiff on arbitrary JSON: the input is a JSON array of
/// - `[object, diff]`: decode the diff and apply it;
/// - `[base, local, remote]`: decode both diffs and rebase local over remote, then apply;
/// - `["text", "delta"]`: a `d` delta on the text (the diff-match-patch delta decoder).
/// Refusals are typed errors; what applies must render to JSON that parses back.
func fuzzJSONDiffApply(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    guard let data else { return 0 }
    let bytes = UnsafeBufferPointer(start: data, count: size)
    guard case .array(let parts)? = try? JSONValue(parsing: bytes) else { return 0 }
    switch parts.count {
    case 2:
        if case .string(let text) = parts[0], case .string(let delta) = parts[1] {
            check(try? JSONDiffing.apply(["s": .stringDelta(delta)], to: ["s": .string(text)]))
            check(try? JSONDiffing.apply(["l": .listDelta(delta)], to: ["l": [.string(text), 1]]))
            return 0
        }
        guard case .object(let object) = parts[0], let diff = try? JSONDiffing.decode(parts[1]) else { return 0 }
        check(try? JSONDiffing.apply(diff, to: object))
        // Encoding is the inverse of decoding.
        guard (try? JSONDiffing.decode(JSONDiffing.encode(diff))) == diff else { fatalError("diff encode/decode round trip") }
    case 3:
        guard case .object(let base) = parts[0], let local = try? JSONDiffing.decode(parts[1]),
              let remote = try? JSONDiffing.decode(parts[2]) else { return 0 }
        guard let rebased = try? JSONDiffing.transform(local, over: remote, base: base),
              let afterRemote = try? JSONDiffing.apply(remote, to: base) else { return 0 }
        check(try? JSONDiffing.apply(rebased, to: afterRemote))
    default:
        return 0
    }
    return 0
}

/// A result of apply must be a value that renders and parses back.
private func check(_ object: JSONObject?) {
    guard let object else { return }
    let rendered = JSONValue.object(object).compactRendered()
    guard (try? JSONValue(parsing: rendered)) != nil else { fatalError("applied value does not parse: \(rendered.debugDescription)") }
    // A diff from the result to itself is empty.
    guard JSONDiffing.diff(from: object, to: object).isEmpty else { fatalError("self diff not empty") }
}

exit(bucketfs_fuzz_main(CommandLine.argc, CommandLine.unsafeArgv, fuzzJSONDiffApply))
