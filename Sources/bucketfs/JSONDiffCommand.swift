import ArgumentParser
import Foundation
import JSONDiff

/// `bucketfs jsondiff`: the jsondiff engine on files, so scripts and other implementations can check us.
struct JSONDiffCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "jsondiff",
        abstract: "Diff, apply and transform JSON objects with Simperium's jsondiff.",
        discussion: "Each subcommand prints JSON to standard output. Bad input is reported on standard error with exit status 1.",
        subcommands: [Diff.self, Apply.self, Transform.self]
    )

    struct Diff: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print the object diff that turns A into B ({} when they are equal).")
        @Argument(help: "The source JSON object.") var a: String
        @Argument(help: "The target JSON object.") var b: String
        @Option(name: .long, help: "A jsondiff policy file ({\"attributes\": {...}, \"otype\": ...}).") var policy: String?

        func run() throws {
            let policy = try self.policy.map { try DiffPolicy(json: readJSON($0)) }
            let diff = JSONDiffing.diff(from: try readObject(a), to: try readObject(b), policy: policy)
            print(JSONDiffing.encode(diff).prettyRendered(), terminator: "")
        }
    }

    struct Apply: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Apply the object diff D to the object V and print the result.")
        @Argument(help: "The JSON object to change.") var value: String
        @Argument(help: "The object diff ({key: {\"o\": op, \"v\": value}}).") var diff: String

        func run() throws {
            let diff = try JSONDiffing.decode(readJSON(self.diff))
            let result = try CommandError.context("the diff does not apply") { try JSONDiffing.apply(diff, to: readObject(value)) }
            print(JSONValue.object(result).prettyRendered(), terminator: "")
        }
    }

    struct Transform: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Rebase the local diff L over the remote diff R (both made from BASE) and print it.",
            discussion: "Applying the printed diff after R keeps both edits.")
        @Argument(help: "The local object diff.") var local: String
        @Argument(help: "The remote object diff.") var remote: String
        @Argument(help: "The object both diffs were made from.") var base: String
        @Option(name: .long, help: "A jsondiff policy file.") var policy: String?

        func run() throws {
            let policy = try self.policy.map { try DiffPolicy(json: readJSON($0)) }
            let rebased = try JSONDiffing.transform(
                JSONDiffing.decode(readJSON(local)), over: JSONDiffing.decode(readJSON(remote)),
                base: readObject(base), policy: policy)
            print(JSONDiffing.encode(rebased).prettyRendered(), terminator: "")
        }
    }
}

/// Reads and parses a JSON file, naming the file in the error.
private func readJSON(_ path: String) throws -> JSONValue {
    guard let data = FileManager.default.contents(atPath: path) else {
        throw CommandError("\(path): cannot read the file")
    }
    do {
        return try JSONValue(parsing: Array(data))
    } catch {
        throw CommandError("\(path): \(error)")
    }
}

private func readObject(_ path: String) throws -> JSONObject {
    guard case .object(let object) = try readJSON(path) else {
        throw CommandError("\(path): expected a JSON object")
    }
    return object
}
