import Foundation
import JSONDiff

/// What a running mount tells `bucketfs status` and `bucketfs watch`: a small JSON file in the
/// state directory, rewritten when the connection changes, beside an append-only change feed.
/// Files, not a socket, so status keeps working (from the store) when the mount is gone.
struct MountRecord: Codable, Sendable {
    struct Connection: Codable, Sendable {
        var state: String
        var since: Date?
        var retryAt: Date?
        var reason: String?
    }

    var mountpoint: String
    /// The server the mount is on now (or last tried).
    var server: String
    /// Every server it may use, in order, when there are several (`--server` given more than once).
    var servers: [String]? = nil
    /// The place of `server` in `servers`, from 1.
    var serverPosition: Int? = nil
    var appID: String
    var store: String
    var buckets: [String]
    var pid: Int32
    var startedAt: Date
    var connection: Connection

    static func path(for mountpoint: String) -> String {
        Paths.stateDirectory + "/\(Paths.mountName(for: mountpoint)).json"
    }

    static func feedPath(for mountpoint: String) -> String {
        Paths.stateDirectory + "/\(Paths.mountName(for: mountpoint)).feed.jsonl"
    }

    static func load(path: String) -> MountRecord? {
        guard let data = FileManager.default.contents(atPath: path) else { return nil }
        return try? JSONDecoder.bucketfs.decode(MountRecord.self, from: data)
    }

    /// Every record in the state directory, newest first.
    /// The record of `mountpoint` (an error naming it if bucketfs never mounted it), or every record.
    static func records(for mountpoint: String?) throws -> [MountRecord] {
        guard let mountpoint else { return all() }
        let path = Paths.absolute(mountpoint)
        guard let record = load(path: self.path(for: path)) else {
            throw CommandError("bucketfs has never mounted \(path) (no record in \(Paths.stateDirectory))")
        }
        return [record]
    }

    static func all() -> [MountRecord] {
        let directory = Paths.stateDirectory
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        return names.filter { $0.hasSuffix(".json") }
            .compactMap { load(path: directory + "/" + $0) }
            .sorted { $0.startedAt > $1.startedAt }
    }

    /// `ws://b:4000 (2 of 2)`, or the server alone when it is the only one.
    var serverDescription: String { Self.describe(server: server, servers: servers, position: serverPosition) }

    static func describe(server: String, servers: [String]?, position: Int?) -> String {
        guard let servers, let position else { return server }
        return "\(server) (\(position) of \(servers.count))"
    }

    /// Whether the process that wrote the record still runs (and so the mount is live).
    var isRunning: Bool { kill(pid, 0) == 0 && isMounted(mountpoint) }

    func save() {
        guard let data = try? JSONEncoder.bucketfs.encode(self) else { return }
        try? data.write(to: URL(fileURLWithPath: Self.path(for: mountpoint)), options: .atomic)
    }
}

/// One line of the change feed (`bucketfs watch`).
struct FeedEvent: Codable, Sendable {
    var time: Date
    var bucket: String
    var key: String
    var version: Int?
    /// `local` (saved through this mount) or `remote` (arrived from the server).
    var origin: String
    /// `created`, `changed` or `removed`.
    var kind: String
    /// The client id that made a remote change, when the server said (who made it).
    var client: String? = nil
    /// The entity's title (its text's first line) in a bucket shown as plain text.
    var title: String? = nil
}

extension FeedEvent {
    /// The event as its feed line, the object `JSONEncoder.bucketfs` wrote (sorted keys, the
    /// time in ISO 8601 UTC, whole seconds) that `bucketfs watch` decodes with
    /// `JSONDecoder.bucketfs`, rendered directly: the generic encoder cost each save ~40,000
    /// instructions, more than recording its change as sent.
    var line: [UInt8] {
        // The members in code point order, as `compactRendered` would write them, without the
        // dictionary and the sort: a first sync writes a line for each of its entities.
        var members = JSONMemberWriter()
        members.key("bucket")
        members.string(bucket)
        if let client {
            members.key("client")
            members.string(client)
        }
        for (name, value) in [("key", key), ("kind", kind), ("origin", origin), ("time", Self.iso8601(time))] {
            members.key(name)
            members.string(value)
        }
        if let title {
            members.key("title")
            members.string(title)
        }
        if let version {
            members.key("version")
            members.integer(version)
        }
        return Array(members.rendered().utf8)
    }

    /// `2026-11-25T16:40:05Z`, as the encoder's `.iso8601` strategy writes a date.
    static func iso8601(_ date: Date) -> String {
        var seconds = time_t(date.timeIntervalSince1970.rounded(.down))
        var parts = tm()
        gmtime_r(&seconds, &parts)
        func two(_ value: Int32) -> String { value < 10 ? "0\(value)" : "\(value)" }
        let year = String(parts.tm_year + 1900)
        return "\(String(repeating: "0", count: max(0, 4 - year.count)))\(year)-\(two(parts.tm_mon + 1))-\(two(parts.tm_mday))T"
            + "\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec))Z"
    }
}

/// Appends feed events to the mount's feed file, one JSON object per line. A feed past
/// `sizeLimit` starts over in a new file and the full one is kept as the previous feed
/// (`path.1`, replacing the one before), so a mount that lives for months keeps at most twice
/// the limit on disk. `bucketfs watch` follows the feed across the switch.
final class FeedWriter: @unchecked Sendable {
    /// 4 MiB, ~25,000 changes; `BUCKETFS_FEED_MAX_BYTES` sets another (the tests' small one).
    static var sizeLimit: Int {
        ProcessInfo.processInfo.environment["BUCKETFS_FEED_MAX_BYTES"].flatMap(Int.init).map { max($0, 1) } ?? 4 << 20
    }

    static func previousPath(of path: String) -> String { path + ".1" }

    private let path: String
    private let sizeLimit: Int
    private let lock = NSLock()
    /// Guarded by `lock`, as is `size`.
    private var handle: FileHandle?
    private var size: Int

    init(path: String, sizeLimit: Int = FeedWriter.sizeLimit) {
        self.path = path
        self.sizeLimit = sizeLimit
        if !FileManager.default.fileExists(atPath: path) {
            FileManager.default.createFile(atPath: path, contents: nil)
        }
        handle = FileHandle(forWritingAtPath: path)
        size = Int((try? handle?.seekToEnd()) ?? 0)
    }

    func append(_ event: FeedEvent) { append([event]) }

    /// Appends the events' lines with as few writes as the size limit allows (one, mostly).
    func append(_ events: [FeedEvent]) {
        lock.lock()
        defer { lock.unlock() }
        var pending: [UInt8] = []
        for event in events {
            var line = event.line
            line.append(UInt8(ascii: "\n"))
            if size + pending.count > 0 && size + pending.count + line.count > sizeLimit {
                if !pending.isEmpty { try? handle?.write(contentsOf: pending) }
                size += pending.count
                pending.removeAll(keepingCapacity: true)
                startNewFile()
            }
            pending.append(contentsOf: line)
        }
        if !pending.isEmpty { try? handle?.write(contentsOf: pending) }
        size += pending.count
    }

    private func startNewFile() {
        try? handle?.close()
        // rename(2) replaces the previous feed in one step; a watcher still reading the full
        // file by its old descriptor or from `path.1` misses nothing.
        _ = Glibc.rename(path, Self.previousPath(of: path))
        FileManager.default.createFile(atPath: path, contents: nil)
        handle = FileHandle(forWritingAtPath: path)
        size = 0
    }
}

extension JSONEncoder {
    static var bucketfs: JSONEncoder {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        encoder.outputFormatting = [.sortedKeys]
        return encoder
    }
}

extension JSONDecoder {
    static var bucketfs: JSONDecoder {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        return decoder
    }
}
