import Glibc
import Synchronization

/// One edit of a file in a bucket (a save of its bytes, its removal, or its rename), as the
/// journal keeps it until the store has it.
public struct JournaledEdit: Hashable, Sendable {
    public enum Edit: Hashable, Sendable {
        /// The file's new bytes (creating it if needed).
        case save([UInt8])
        /// unlink(2).
        case remove
        /// rename(2) onto `to`, replacing what is there: the file moves with its bytes, number,
        /// modification time and attributes, as `SyncStore.rename` moves it (an editor's scratch
        /// file renamed over the entity it saves).
        case rename(to: EntryName)
    }

    /// Increases by one per edit, across mounts: the store records the last one it applied, so a
    /// replay never applies an edit twice (or over what came after it).
    public let sequence: Int64
    public let bucket: String
    /// The file edited (a rename's source): an entity's file, or a local-only file.
    public let file: EntryName
    public let edit: Edit
    /// The node id a file created in memory was handed (`reserveNodeIDs`); nil for a file the
    /// store already has.
    public let nodeID: Int64?
    /// When the edit was made (nanoseconds since the epoch): a save's mtime and ctime, a
    /// rename's ctime.
    public let time: Int64

    public init(sequence: Int64, bucket: String, file: EntryName, edit: Edit, nodeID: Int64? = nil, time: Int64) {
        self.sequence = sequence
        self.bucket = bucket
        self.file = file
        self.edit = edit
        self.nodeID = nodeID
        self.time = time
    }

    /// An edit of the entity `key`'s file.
    public init(sequence: Int64, bucket: String, key: String, edit: Edit, nodeID: Int64? = nil, time: Int64) {
        self.init(sequence: sequence, bucket: bucket, file: .entity(key: key), edit: edit, nodeID: nodeID, time: time)
    }

    /// The entities whose files the edit changes (a rename's source and destination both).
    public var entityKeys: [String] {
        var keys: [String] = []
        if case .entity(let key) = file { keys.append(key) }
        if case .rename(to: .entity(let key)) = edit { keys.append(key) }
        return keys
    }

    /// The edited file's name in the store (its key or local name), for messages.
    public var fileName: String {
        switch file {
        case .entity(let key): return key
        case .localFile(let name): return name
        }
    }
}

/// A file of saves, removals and renames of files on their way to the store, one record per
/// edit: an edit is safe from a crash of the process as soon as its one write(2) returns (the
/// kernel holds the bytes), without a store transaction in the file system's request; `sync`
/// makes the edits so far survive a power loss as well. The store takes the edits in batches
/// (`SyncStore.applyJournaledEdits`) and the journal is emptied once the store has them all.
///
/// The file is kept at a size it has written (zeros past the records), and records overwrite it
/// from the start: an fsync then flushes the records alone, where one that grew the file would
/// also commit its new size and blocks (a third more time on ext4). Emptying it only moves the
/// write position back to the start.
///
/// Record: payload length (UInt32), FNV-1a 64 checksum of the payload (UInt64), payload:
/// sequence, time and node id (Int64; 0 for none), bucket, the file's key or local name (each a
/// UInt32 length and UTF-8 bytes), the edit (a byte, `Kind`) and the rest: a save's bytes, or a
/// rename's destination (a byte, 0 an entity and 1 a local file, then its name as above).
/// Little-endian. Reading stops at the first record that is cut short or fails its checksum (a
/// power loss before an fsync, which never promised it; zeros past the last record), or whose
/// sequence number is not above the one before it: a record from before the journal was last
/// emptied, which the store has.
public final class SaveJournal: Sendable {
    public let path: String
    private let descriptor: Int32
    private let extent: Mutex<Extent>

    struct Extent {
        /// Where the records end: the next one goes here.
        var end: Int
        /// The file's size, every byte of it written.
        var size: Int
    }

    /// What a new journal is given, and what an emptied one that grew past four times that
    /// goes back to.
    static let initialSize = 256 << 10

    /// Where the journal of the store at `storePath` lives: beside it, as SQLite's WAL does.
    public static func path(besideStore storePath: String) -> String {
        storePath + "-saves"
    }

    /// Opens the journal at `path`, creating it if needed; records go on after those it holds.
    public init(path: String) throws(StoreError) {
        let descriptor = Glibc.open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw StoreError.system("cannot open the save journal \(path)") }
        self.path = path
        self.descriptor = descriptor
        extent = Mutex(Extent(end: 0, size: 0))
        let contents = try readAll()
        extent.withLock { $0 = Extent(end: Self.recordsLength(contents), size: contents.count) }
    }

    deinit {
        Glibc.close(descriptor)
    }

    /// The edits the file holds, oldest first.
    public func recorded() throws(StoreError) -> [JournaledEdit] {
        Self.decode(try readAll())
    }

    /// The edits the journal at `path` holds, oldest first, read without opening it for
    /// writing (another process's: `bucketfs sync` and `status` beside a running mount); none
    /// when there is no journal.
    public static func recorded(atPath path: String) throws(StoreError) -> [JournaledEdit] {
        let descriptor = Glibc.open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else {
            if errno == ENOENT { return [] }
            throw StoreError.system("cannot open the save journal \(path)")
        }
        defer { Glibc.close(descriptor) }
        return decode(try readAll(descriptor, path: path))
    }

    private func readAll() throws(StoreError) -> [UInt8] {
        try Self.readAll(descriptor, path: path)
    }

    private static func readAll(_ descriptor: Int32, path: String) throws(StoreError) -> [UInt8] {
        var contents: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 1 << 16)
        var offset = 0
        while true {
            let count = chunk.withUnsafeMutableBytes { pread(descriptor, $0.baseAddress, $0.count, off_t(offset)) }
            if count < 0 {
                if errno == EINTR { continue }
                throw StoreError.system("cannot read the save journal \(path)")
            }
            if count == 0 { break }
            contents += chunk[0..<count]
            offset += count
        }
        return contents
    }

    /// Writes `edit` after the records so far, in one write; when it fails (the disk is full),
    /// nothing of it is ever read.
    public func append(_ edit: JournaledEdit) throws(StoreError) {
        let record = Self.encodedParts(edit)
        let count = record.head.count + record.bytes.count
        try extent.withLock { extent throws(StoreError) in
            if extent.end + count > extent.size {
                extent.size = try grow(from: extent.size, toHold: extent.end + count)
            }
            try write(record.head[...], then: record.bytes, at: extent.end)
            extent.end += count
        }
    }

    /// Makes every edit written so far survive a power loss.
    public func sync() throws(StoreError) {
        guard fdatasync(descriptor) == 0 else { throw StoreError.system("fsync of the save journal \(path) failed") }
    }

    /// Empties the journal (the store holds every edit in it): the next record goes at the
    /// start, and the records after it are never read. Its first header is zeroed, so that a
    /// later opening finds it empty too (were that lost in a crash, the store skips them).
    public func removeAll() throws(StoreError) {
        try extent.withLock { extent throws(StoreError) in
            if extent.end > 0 { try write([UInt8](repeating: 0, count: Self.headerSize)[...], at: 0) }
            extent.end = 0
            guard extent.size > 4 * Self.initialSize else { return }
            guard ftruncate(descriptor, off_t(Self.initialSize)) == 0 else {
                throw StoreError.system("cannot shrink the save journal \(path)")
            }
            extent.size = Self.initialSize
        }
    }

    /// Writes zeros from `size` on until the file holds `needed` bytes (twice its size at
    /// least, so a burst grows it a few times only); returns the new size. On failure the file
    /// is as it was.
    private func grow(from size: Int, toHold needed: Int) throws(StoreError) -> Int {
        let newSize = max(needed, 2 * size, Self.initialSize)
        let zeros = [UInt8](repeating: 0, count: min(newSize - size, 1 << 20))
        var offset = size
        do throws(StoreError) {
            while offset < newSize {
                let count = min(zeros.count, newSize - offset)
                try write(zeros[..<count], at: offset)
                offset += count
            }
        } catch {
            _ = ftruncate(descriptor, off_t(size))
            throw error
        }
        return newSize
    }

    /// pwritev(2) of `head` and then `tail` at `offset`, the rest again after a short write.
    private func write(_ head: ArraySlice<UInt8>, then tail: [UInt8] = [], at offset: Int) throws(StoreError) {
        let total = head.count + tail.count
        var written = 0
        while written < total {
            let count = head.withUnsafeBytes { head in
                tail.withUnsafeBytes { tail in
                    var parts: [iovec] = []
                    if written < head.count, let base = head.baseAddress {
                        parts.append(iovec(iov_base: UnsafeMutableRawPointer(mutating: base + written), iov_len: head.count - written))
                    }
                    let tailWritten = max(0, written - head.count)
                    if tailWritten < tail.count, let base = tail.baseAddress {
                        parts.append(iovec(iov_base: UnsafeMutableRawPointer(mutating: base + tailWritten), iov_len: tail.count - tailWritten))
                    }
                    return pwritev(descriptor, parts, Int32(parts.count), off_t(offset + written))
                }
            }
            if count < 0 {
                if errno == EINTR { continue }
                throw StoreError.system("cannot write the save journal \(path)")
            }
            written += count
        }
    }

    // MARK: - Format

    static let headerSize = 12

    /// The edit byte: what the edit does, and whether the file is an entity's or a local one.
    /// An entity's save and removal keep the values they had before local files were journaled.
    enum Kind {
        static let saveEntity: UInt8 = 0
        static let removeEntity: UInt8 = 1
        static let saveLocalFile: UInt8 = 2
        static let removeLocalFile: UInt8 = 3
        static let renameEntity: UInt8 = 4
        static let renameLocalFile: UInt8 = 5
    }

    /// The edit's record: its header (the payload's length and checksum) and its payload.
    static func encode(_ edit: JournaledEdit) -> [UInt8] {
        let record = encodedParts(edit)
        return record.head + record.bytes
    }

    /// The edit's record in two parts that one pwritev(2) writes: the header and the payload up
    /// to a save's bytes (the header's place kept at its start and filled last), and those bytes
    /// as they are. A save of several MiB was copied whole into its record (issue 37).
    static func encodedParts(_ edit: JournaledEdit) -> (head: [UInt8], bytes: [UInt8]) {
        let bytes: [UInt8]
        if case .save(let saved) = edit.edit { bytes = saved } else { bytes = [] }
        var record: [UInt8] = []
        record.reserveCapacity(headerSize + 41 + edit.bucket.utf8.count + edit.fileName.utf8.count)
        record.append(contentsOf: repeatElement(0, count: headerSize))
        appendInteger(UInt64(bitPattern: edit.sequence), to: &record)
        appendInteger(UInt64(bitPattern: edit.time), to: &record)
        appendInteger(UInt64(bitPattern: edit.nodeID ?? 0), to: &record)
        appendText(edit.bucket, to: &record)
        appendText(edit.fileName, to: &record)
        let local = !edit.file.isEntity
        switch edit.edit {
        case .save: record.append(local ? Kind.saveLocalFile : Kind.saveEntity)
        case .remove: record.append(local ? Kind.removeLocalFile : Kind.removeEntity)
        case .rename(let destination):
            record.append(local ? Kind.renameLocalFile : Kind.renameEntity)
            switch destination {
            case .entity(let key):
                record.append(0)
                appendText(key, to: &record)
            case .localFile(let name):
                record.append(1)
                appendText(name, to: &record)
            }
        }
        let length = UInt32(record.count - headerSize + bytes.count)
        let sum = checksum(bytes[...], continuing: checksum(record[headerSize...]))
        record.withUnsafeMutableBytes { header in
            header.storeBytes(of: length.littleEndian, toByteOffset: 0, as: UInt32.self)
            header.storeBytes(of: sum.littleEndian, toByteOffset: 4, as: UInt64.self)
        }
        return (record, bytes)
    }

    static func decode(_ contents: [UInt8]) -> [JournaledEdit] {
        records(in: contents).edits
    }

    /// How many bytes at the start of `contents` are records that `decode` reads.
    static func recordsLength(_ contents: [UInt8]) -> Int {
        records(in: contents).length
    }

    private static func records(in contents: [UInt8]) -> (edits: [JournaledEdit], length: Int) {
        var edits: [JournaledEdit] = []
        var offset = 0
        while contents.count - offset >= headerSize {
            let length = Int(integer(UInt32.self, in: contents, at: offset))
            let sum = integer(UInt64.self, in: contents, at: offset + 4)
            let start = offset + headerSize
            guard length <= contents.count - start else { break }
            let payload = contents[start..<(start + length)]
            guard checksum(payload) == sum, let edit = parsePayload(payload),
                edits.last.map({ $0.sequence < edit.sequence }) ?? true
            else { break }
            edits.append(edit)
            offset = start + length
        }
        return (edits, offset)
    }

    private static func parsePayload(_ payload: ArraySlice<UInt8>) -> JournaledEdit? {
        var offset = payload.startIndex
        func take(_ count: Int) -> ArraySlice<UInt8>? {
            guard count >= 0, payload.endIndex - offset >= count else { return nil }
            defer { offset += count }
            return payload[offset..<(offset + count)]
        }
        func int64() -> Int64? { take(8).map { Int64(bitPattern: integer(UInt64.self, in: Array($0), at: 0)) } }
        func text() -> String? {
            guard let length = take(4).map({ Int(integer(UInt32.self, in: Array($0), at: 0)) }), let bytes = take(length) else {
                return nil
            }
            return String(validating: bytes, as: UTF8.self)
        }
        guard let sequence = int64(), let time = int64(), let nodeID = int64(), let bucket = text(), let name = text(),
            let kind = take(1)?.first
        else { return nil }
        let edit: JournaledEdit.Edit
        switch kind {
        case Kind.saveEntity, Kind.saveLocalFile:
            edit = .save(Array(payload[offset...]))
        case Kind.removeEntity, Kind.removeLocalFile:
            guard offset == payload.endIndex else { return nil }
            edit = .remove
        case Kind.renameEntity, Kind.renameLocalFile:
            guard let destinationKind = take(1)?.first, destinationKind <= 1, let destination = text(),
                offset == payload.endIndex
            else { return nil }
            edit = .rename(to: destinationKind == 0 ? .entity(key: destination) : .localFile(name: destination))
        default:
            return nil
        }
        let local = kind == Kind.saveLocalFile || kind == Kind.removeLocalFile || kind == Kind.renameLocalFile
        return JournaledEdit(
            sequence: sequence, bucket: bucket, file: local ? .localFile(name: name) : .entity(key: name), edit: edit,
            nodeID: nodeID == 0 ? nil : nodeID, time: time)
    }

    /// FNV-1a, 64 bits: finds a record cut short or overwritten, which is all it is asked to do.
    /// `continuing`: the checksum of the bytes before these, for a payload in two parts.
    static func checksum(_ bytes: ArraySlice<UInt8>, continuing hash: UInt64 = 0xcbf2_9ce4_8422_2325) -> UInt64 {
        var hash = hash
        for byte in bytes {
            hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01b3
        }
        return hash
    }

    private static func appendText(_ text: String, to bytes: inout [UInt8]) {
        appendInteger(UInt32(text.utf8.count), to: &bytes)
        bytes += text.utf8
    }

    private static func appendInteger<T: FixedWidthInteger>(_ value: T, to bytes: inout [UInt8]) {
        withUnsafeBytes(of: value.littleEndian) { bytes += $0 }
    }

    private static func integer<T: FixedWidthInteger>(_ type: T.Type, in bytes: [UInt8], at offset: Int) -> T {
        var value: T = 0
        for index in (0..<MemoryLayout<T>.size).reversed() {
            value = value << 8 | T(bytes[offset + index])
        }
        return value
    }
}
