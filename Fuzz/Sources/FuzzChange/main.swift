#if canImport(Glibc)
import Glibc
#endif
import FuzzDriver
import JSONDiff
import SyncProtocol

/// A `c` payload as the server reads it from a client (change by change, each malformed change
/// its own refusal) and as a client reads the server's; parsed changes render and parse back.
func fuzzChange(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    guard let data else { return 0 }
    let payload = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    if let outcomes = try? ChangeRequest.outcomes(payload: payload) {
        var valid: [ChangeRequest] = []
        for case .valid(let change) in outcomes { valid.append(change) }
        if !valid.isEmpty {
            let rendered = ChangeRequest.renderPayload(valid)
            guard let again = try? ChangeRequest.parseAll(payload: rendered), again.count == valid.count else {
                fatalError("rendered changes do not parse back: \(rendered.debugDescription)")
            }
            _ = ChangeRequest.frames(valid, channel: 0, maxBytes: 512)
        }
    }
    _ = try? ChangeRequest.parseAll(payload: payload)
    if let changes = try? Change.parseAll(payload: payload), !changes.isEmpty {
        let rendered = Change.renderPayload(changes)
        guard let again = try? Change.parseAll(payload: rendered), again.count == changes.count else {
            fatalError("rendered server changes do not parse back: \(rendered.debugDescription)")
        }
    }
    return 0
}

exit(bucketfs_fuzz_main(CommandLine.argc, CommandLine.unsafeArgv, fuzzChange))
