import BucketFS
import Foundation

/// A note named by its path inside a mount (`MOUNT/BUCKET/NAME.json`): the mount it belongs to
/// (from the mount records) and the bucket and key its names stand for. The file need not exist:
/// a deleted note is named the same way.
struct MountedFile {
    let record: MountRecord
    /// The absolute path.
    let path: String
    let bucket: String
    let key: String

    init(_ given: String) throws {
        let path = Paths.absolute(given)
        let owners = MountRecord.all().filter { path.hasPrefix($0.mountpoint + "/") }
        guard let record = owners.max(by: { $0.mountpoint.utf8.count < $1.mountpoint.utf8.count }) else {
            throw CommandError("\(path) is not inside a bucketfs mount (bucketfs status lists them)")
        }
        let parts = path.utf8.dropFirst(record.mountpoint.utf8.count + 1).split(
            separator: UInt8(ascii: "/"), omittingEmptySubsequences: false
        ).map { String(decoding: $0, as: UTF8.self) }
        guard parts.count == 2, let bucket = FileNameCodec.decode(parts[0]) else {
            throw CommandError("\(given) is not a note: name a file in a bucket directory, MOUNT/BUCKET/NAME.json")
        }
        guard case .entity(let key) = FileNameCodec.itemName(forFileName: parts[1]) else {
            throw CommandError("\(given) is a local-only file (not synced), so the server keeps no versions of it")
        }
        self.record = record
        self.path = path
        self.bucket = bucket
        self.key = key
    }

    /// Asks the running mount to fetch the versions the server keeps into its store. Returns
    /// the mount's answer, or why the server could not be asked (offline, mount not running).
    func fetchHistory() -> Result<ControlReply, CommandError> {
        guard record.isRunning else { return .failure(CommandError("the mount \(record.mountpoint) is not running")) }
        do {
            let reply = try ControlSocket.send(
                ControlRequest(operation: .fetchHistory, bucket: bucket, key: key), mountpoint: record.mountpoint)
            if let error = reply.error { return .failure(CommandError(error)) }
            return .success(reply)
        } catch {
            return .failure(CommandError("\(error)"))
        }
    }
}
