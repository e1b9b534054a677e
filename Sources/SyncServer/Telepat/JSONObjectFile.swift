import Foundation
import JSONDiff
import Logging

/// A JSON object the Telepat front end keeps whole in a file of the data directory (a server
/// without one keeps it in memory only: `path` nil).
struct JSONObjectFile: Sendable {
    let path: String?
    /// What the file holds, for the log ("Telepat devices").
    let holding: String
    let logger: Logger

    /// What the file holds now; nil when there is no file or it is not a JSON object.
    func load() -> JSONObject? {
        guard let path, let data = FileManager.default.contents(atPath: path) else { return nil }
        return (try? JSONValue(parsing: Array(data)))?.objectValue
    }

    func save(_ object: JSONObject) {
        guard let path else { return }
        do {
            // Written whole then renamed: a crash leaves the old object or the new one.
            try Data(JSONValue.object(object).compactRenderedBytes()).write(to: URL(fileURLWithPath: path), options: .atomic)
        } catch {
            logger.error("cannot save \(holding)", metadata: ["path": "\(path)", "error": "\(error)"])
        }
    }
}
