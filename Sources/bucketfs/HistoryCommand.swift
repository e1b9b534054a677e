import ArgumentParser
import Foundation
import JSONDiff
import SyncStore

/// `bucketfs history FILE`: the versions the server keeps of a note.
struct History: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List the versions the server keeps of a note; show one, or diff two.",
        discussion: """
            FILE is a note's path inside a mount (it may have been deleted). The running mount \
            asks the server for the versions it keeps (bucketfs's server keeps the last 60) and \
            remembers them in its store; offline, or with the mount stopped, the versions fetched \
            before are listed and the rest are unavailable. Each line: version, when the server \
            accepted it (bucketfs's server says; others do not), size of the file, and what \
            changed from the version before (keys added +, removed -, changed; for text, \
            characters added and removed). Bring a version back with `bucketfs restore`.
            """
    )

    @Argument(help: "A note: MOUNT/BUCKET/NAME.json.")
    var file: String

    @Flag(help: "Print JSON for scripts.")
    var json = false

    @Option(help: ArgumentHelp("Print version N exactly as the mount shows a file.", valueName: "N"))
    var show: Int?

    @Option(
        parsing: .upToNextOption,
        help: ArgumentHelp("A diff from version N to version M (default: the file as it is now).", valueName: "N [M]"))
    var diff: [Int] = []

    func validate() throws {
        if show != nil && !diff.isEmpty { throw ValidationError("give --show or --diff, not both") }
        if diff.count > 2 { throw ValidationError("--diff takes one or two versions") }
        if json && (show != nil || !diff.isEmpty) { throw ValidationError("--json goes with the list, not --show or --diff") }
    }

    func run() async throws {
        let history = try EntityHistory.load(try MountedFile(file))
        if let show {
            print(EntityHistory.rendered(try data(of: history.version(show))), terminator: "")
        } else if let first = diff.first {
            print(try difference(history, from: first, to: diff.dropFirst().first), terminator: "")
        } else if json {
            let encoder = JSONEncoder.bucketfs
            encoder.outputFormatting = [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes]
            print(String(decoding: try encoder.encode(HistoryReport(history)), as: UTF8.self))
        } else {
            print(HistoryReport(history).text, terminator: "")
        }
    }

    private func data(of version: EntityVersion) throws -> JSONObject {
        guard let data = version.data else { throw CommandError("version \(version.version) has no data") }
        return data
    }

    private func difference(_ history: EntityHistory, from first: Int, to second: Int?) throws -> String {
        let old = EntityHistory.rendered(try data(of: history.version(first)))
        let name = (history.file.path as NSString).lastPathComponent
        let new: String
        let newLabel: String
        if let second {
            new = EntityHistory.rendered(try data(of: history.version(second)))
            newLabel = "\(name) (version \(second))"
        } else if let now = history.currentText() {
            new = now
            newLabel = "\(name) (now)"
        } else {
            new = ""
            newLabel = "\(name) (deleted)"
        }
        return UnifiedDiff.render(from: old, to: new, oldLabel: "\(name) (version \(first))", newLabel: newLabel)
    }
}
