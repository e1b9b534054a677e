import Testing
@testable import SyncProtocol

/// The error `body` throws, or nil (and a recorded issue) if it does not throw.
func protocolError<T>(
    _ body: () throws(ProtocolError) -> T, sourceLocation: SourceLocation = #_sourceLocation
) -> ProtocolError? {
    do {
        let value = try body()
        Issue.record("expected an error, got \(value)", sourceLocation: sourceLocation)
        return nil
    } catch {
        return error
    }
}

/// The spec's example JSON with the spaces after `:` and `,` removed (its strings have none).
func compacted(_ text: String) -> String {
    text.replacingOccurrences(", ", with: ",").replacingOccurrences(": ", with: ":")
}

extension String {
    func replacingOccurrences(_ target: String, with replacement: String) -> String {
        split(separator: target, omittingEmptySubsequences: false).joined(separator: replacement)
    }
}
