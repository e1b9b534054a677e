import Glibc

/// One edit of an entity file (a save of its bytes, or its removal), as the journal keeps it
/// until the store has it.
public struct JournaledEdit: Hashable, Sendable {
    public enum Edit: Hashable, Sendable {
        /// The file's new bytes (creating it if needed).
        case save([UInt8])
        /// unlink(2).
        case remove
    }

    /// Increases by one per edit, across mounts: the store records the last one it applied, so a
    /// replay never applies an edit twice (or over what came after it).
    public let sequence: Int64
    public let bucket: String
    public let key: String
    public let edit: Edit
    /// The node id a file created in memory was handed (`reserveNodeIDs`); nil for a file the
    /// store already has.
    public let nodeID: Int64?
    /// When the edit was made (nanoseconds since the epoch): a save's mtime and ctime.
    public let time: Int64

    public init(sequence: Int64, bucket: String, key: String, edit: Edit, nodeID: Int64? = nil, time: Int64) {
        self.sequence = sequence
        self.bucket = bucket
        self.key = key
        self.edit = edit
        self.nodeID = nodeID
        self.time = time
    }
}

/// An append-only file of saves and removals of entity files on their way to the store: one
/// write(2) per edit, so an edit is safe from a crash of the process as soon as it returns (the
/// kernel holds the bytes), without a store transaction in the file system's request. The store
/// takes the edits in batches (`SyncStore.applyJournaledEdits`) and the file is emptied once it
/// has them all.
///
/// Record: payload length (UInt32), FNV-1a 64 checksum of the payload (UInt64), payload:
/// sequence, time and node id (Int64; 0 for none), bucket, key (each a UInt32 length and UTF-8
/// bytes), the edit (a byte: 0 a save, 1 a removal) and a save's bytes (the rest). Little-endian.
/// Reading stops at the first record that is cut short or fails its checksum: only a power loss
/// before an fsync leaves one, and what it held was never promised to survive that.
public final class SaveJournal: Sendable {
    public let path: String
    private let descriptor: Int32

    /// Where the journal of the store at `storePath` lives: beside it, as SQLite's WAL does.
    public static func path(besideStore storePath: String) -> String {
        storePath + "-saves"
    }

    /// Opens the journal at `path`, creating it if needed.
    public init(path: String) throws(StoreError) {
        let descriptor = Glibc.open(path, O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw StoreError.system("cannot open the save journal \(path)") }
        self.path = path
        self.descriptor = descriptor
    }

    deinit {
        Glibc.close(descriptor)
    }

    /// The edits the file holds, oldest first.
    public func recorded() throws(StoreError) -> [JournaledEdit] {
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
        return Self.decode(contents)
    }

    /// Appends `edit` in one write; when it fails (the disk is full), nothing of it is left.
    public func append(_ edit: JournaledEdit) throws(StoreError) {
        let record = Self.encode(edit)
        let sizeBefore = lseek(descriptor, 0, SEEK_END)
        var written = 0
        while written < record.count {
            let count = record.withUnsafeBytes { write(descriptor, $0.baseAddress! + written, record.count - written) }
            if count < 0 {
                if errno == EINTR { continue }
                let failure = StoreError.system("cannot write the save journal \(path)")
                if sizeBefore >= 0 { _ = ftruncate(descriptor, sizeBefore) }
                throw failure
            }
            written += count
        }
    }

    /// Empties the file (the store holds every edit in it).
    public func removeAll() throws(StoreError) {
        guard ftruncate(descriptor, 0) == 0 else {
            throw StoreError.system("cannot empty the save journal \(path)")
        }
    }

    // MARK: - Format

    static let headerSize = 12

    static func encode(_ edit: JournaledEdit) -> [UInt8] {
        var payload: [UInt8] = []
        let bytes: [UInt8]
        if case .save(let saved) = edit.edit { bytes = saved } else { bytes = [] }
        payload.reserveCapacity(41 + edit.bucket.utf8.count + edit.key.utf8.count + bytes.count)
        appendInteger(UInt64(bitPattern: edit.sequence), to: &payload)
        appendInteger(UInt64(bitPattern: edit.time), to: &payload)
        appendInteger(UInt64(bitPattern: edit.nodeID ?? 0), to: &payload)
        appendInteger(UInt32(edit.bucket.utf8.count), to: &payload)
        payload += edit.bucket.utf8
        appendInteger(UInt32(edit.key.utf8.count), to: &payload)
        payload += edit.key.utf8
        switch edit.edit {
        case .save: payload.append(0)
        case .remove: payload.append(1)
        }
        payload += bytes
        var record: [UInt8] = []
        record.reserveCapacity(headerSize + payload.count)
        appendInteger(UInt32(payload.count), to: &record)
        appendInteger(checksum(payload[...]), to: &record)
        record += payload
        return record
    }

    static func decode(_ contents: [UInt8]) -> [JournaledEdit] {
        var edits: [JournaledEdit] = []
        var offset = 0
        while contents.count - offset >= headerSize {
            let length = Int(integer(UInt32.self, in: contents, at: offset))
            let sum = integer(UInt64.self, in: contents, at: offset + 4)
            let start = offset + headerSize
            guard length <= contents.count - start else { break }
            let payload = contents[start..<(start + length)]
            guard checksum(payload) == sum, let edit = parsePayload(payload) else { break }
            edits.append(edit)
            offset = start + length
        }
        return edits
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
        guard let sequence = int64(), let time = int64(), let nodeID = int64(), let bucket = text(), let key = text(),
            let kind = take(1)?.first
        else { return nil }
        let edit: JournaledEdit.Edit
        switch kind {
        case 0: edit = .save(Array(payload[offset...]))
        case 1 where offset == payload.endIndex: edit = .remove
        default: return nil
        }
        return JournaledEdit(sequence: sequence, bucket: bucket, key: key, edit: edit, nodeID: nodeID == 0 ? nil : nodeID, time: time)
    }

    /// FNV-1a, 64 bits: finds a record cut short or overwritten, which is all it is asked to do.
    static func checksum(_ bytes: ArraySlice<UInt8>) -> UInt64 {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in bytes {
            hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01b3
        }
        return hash
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
