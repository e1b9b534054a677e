import ArgumentParser
import Foundation

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
        version: Version.text,
        subcommands: [
            Mount.self, Unmount.self, Status.self, Sync.self, List.self, History.self, Restore.self, Watch.self,
            Login.self, Install.self, Serve.self, User.self, Seed.self, ApptimistCommand.self, JSONDiffCommand.self,
            Version.self,
        ]
    )

    /// The arguments this run was given, after the mount-helper translation (the background
    /// mount process is started with them).
    nonisolated(unsafe) static var arguments = Array(CommandLine.arguments.dropFirst())

    static func main() async {
        let invokedAs = (CommandLine.arguments.first as NSString?)?.lastPathComponent ?? ""
        if invokedAs.hasPrefix("mount.") {
            // mount(8) runs /sbin/mount.fuse.bucketfs SOURCE DIR [-o OPTIONS] for fstab lines.
            do {
                arguments = try MountHelper.translate(Array(CommandLine.arguments.dropFirst()))
            } catch {
                FileHandle.standardError.write(Data("\(invokedAs): \(error)\n".utf8))
                Foundation.exit(1)
            }
        }
        arguments = Mount.withFsyncTimeoutSpelledOut(arguments)
        await main(arguments)
    }
}
