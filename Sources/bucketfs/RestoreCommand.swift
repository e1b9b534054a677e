import ArgumentParser
import Foundation

/// `bucketfs restore FILE --version N`: version N becomes the note's content again.
struct Restore: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Make an earlier version of a note its current content (also a deleted note).",
        discussion: """
            The version's content is saved to FILE through the mount, as an editor would save it: \
            the server makes it a new version and every earlier version stays. A deleted note is \
            created again. Refused while the note has local changes the server does not have yet \
            (they would be replaced), unless --force. The mount must be running; offline, only \
            versions `bucketfs history` fetched before can be restored (the save is sent when the \
            server is back).
            """
    )

    @Argument(help: "A note: MOUNT/BUCKET/NAME.json (it may have been deleted).")
    var file: String

    @Option(help: ArgumentHelp("The version to bring back (see bucketfs history).", valueName: "N"))
    var version: Int

    @Flag(help: "Restore even over local changes the server does not have yet.")
    var force = false

    func run() async throws {
        let target = try MountedFile(file)
        guard target.record.isRunning else {
            throw CommandError("the mount \(target.record.mountpoint) is not running: mount it again to restore (a restore is a save)")
        }
        let history = try EntityHistory.load(target)
        if let entity = history.entity, !force, entity.state != .synced || entity.deletedPending {
            throw CommandError(
                "\(target.path) has local changes the server does not have yet (\(entity.deletedPending ? "deleted" : entity.state.description)): "
                    + "a restore would replace them. Wait for them to reach the server (bucketfs sync), or use --force")
        }
        guard let data = try history.version(version).data else {
            throw CommandError("version \(version) has no data")
        }
        let text = EntityHistory.rendered(data)
        if history.currentText() == text {
            print("\(target.path) already holds version \(version); nothing to save")
            return
        }
        try save(text, to: target.path)
        print("restored \(target.path) to version \(version) (saved as a new version; bucketfs sync waits for the server)")
    }

    /// Writes a scratch file beside the note and renames it over the note: one save, as editors
    /// make it, and a reader never sees a half-written file.
    private func save(_ text: String, to path: String) throws {
        let directory = (path as NSString).deletingLastPathComponent
        let scratch = directory + "/.\((path as NSString).lastPathComponent).restore-\(getpid())"
        do {
            try Data(text.utf8).write(to: URL(fileURLWithPath: scratch))
            guard rename(scratch, path) == 0 else {
                throw CommandError("cannot save \(path): \(String(cString: strerror(errno)))")
            }
        } catch {
            unlink(scratch)
            throw error as? CommandError ?? CommandError("cannot save \(path): \(error)")
        }
    }
}
