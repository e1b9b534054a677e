import Foundation
import JSONDiff
import Logging
import Synchronization

/// `bucketfs serve --log-format json` (issue 38): one JSON object per line on standard error,
/// for log shippers. Each has `time` (ISO 8601, UTC, milliseconds), `level`, `label`,
/// `message` and `source`, then the record's metadata as fields of their own (`peer`, `user`,
/// `bucket`, `apptimist`, `reason`, ... where the code that logs knows them). A metadata key
/// never replaces one of the five.
public struct JSONLogHandler: LogHandler {
    public var logLevel: Logger.Level = .info
    public var metadata: Logger.Metadata = [:]
    public var metadataProvider: Logger.MetadataProvider?
    private let label: String
    private let write: @Sendable (String) -> Void

    /// - Parameter write: where each line goes (with its newline); standard error by default.
    public init(label: String, metadataProvider: Logger.MetadataProvider? = nil, write: @escaping @Sendable (String) -> Void = JSONLogHandler.writeToStandardError) {
        self.label = label
        self.metadataProvider = metadataProvider
        self.write = write
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        var fields: JSONObject = [:]
        var merged = metadata
        if let provided = metadataProvider?.get() { merged.merge(provided) { $1 } }
        if let own = event.metadata { merged.merge(own) { $1 } }
        for (key, value) in merged { fields[JSONKey(key)] = Self.json(value) }
        fields["time"] = .string(Self.timestamp(Date()))
        fields["level"] = .string(event.level.rawValue)
        fields["label"] = .string(label)
        fields["message"] = .string(event.message.description)
        fields["source"] = .string(event.source)
        write(JSONValue.object(fields).compactRendered() + "\n")
    }

    private static func json(_ value: Logger.Metadata.Value) -> JSONValue {
        switch value {
        case .string(let text): return .string(text)
        case .stringConvertible(let convertible): return .string(convertible.description)
        case .array(let values): return .array(values.map(json))
        case .dictionary(let dictionary): return .object(JSONObject(uniqueKeysWithValues: dictionary.map { (JSONKey($0.key), json($0.value)) }))
        }
    }

    private static func timestamp(_ date: Date) -> String {
        date.formatted(.iso8601.year().month().day().dateSeparator(.dash).time(includingFractionalSeconds: true).timeSeparator(.colon).timeZone(separator: .omitted))
    }

    /// Writes `line` to standard error in one write(2), so lines from several threads never mix.
    public static let writeToStandardError: @Sendable (String) -> Void = { line in
        standardErrorLock.withLock { _ in
            var bytes = Array(line.utf8)
            var offset = 0
            while offset < bytes.count {
                let written = bytes[offset...].withUnsafeMutableBytes { Foundation.write(2, $0.baseAddress, $0.count) }
                guard written > 0 else { return }
                offset += written
            }
        }
    }

    private static let standardErrorLock = Mutex(())
}
