import ArgumentParser

/// The `bucketfs` command line: one subcommand per file in this folder.
@main
struct BucketFSCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bucketfs",
        abstract: "Mount Simperium-style sync buckets as directories of JSON files.",
        discussion: """
            Each bucket is a directory and each entity a pretty-printed JSON file. Saving a file \
            sends a jsondiff change through the sync engine; changes made elsewhere appear in the \
            files. bucketfs also ships a Simperium-compatible server (`bucketfs serve`).
            """,
        subcommands: [JSONDiffCommand.self]
    )
}
