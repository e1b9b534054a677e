import Foundation
import Glibc

// The machinery of FileSystemModelTests: operations, a deterministic generator, one "world" (a
// directory plus the descriptors opened in it) that carries operations out with the libc calls,
// and the snapshot compared after every step. The local directory is the model: whatever it
// answers is what POSIX says (issue 13, "Must show": the randomized file-system model test).

/// SplitMix64: small, fast, and the same sequence on every machine for a seed.
struct SeededGenerator: RandomNumberGenerator {
    private var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476C_E5B9_E1D5
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// One operation of a sequence; slots are descriptor slots, the same index in both worlds.
enum ModelOp: Sendable, CustomStringConvertible {
    case open(slot: Int, name: String, flags: Int32)
    case close(slot: Int)
    /// close, then open the slot's name again with its flags (less O_EXCL).
    case reopen(slot: Int)
    case read(slot: Int, count: Int)
    case pread(slot: Int, count: Int, offset: Int)
    case write(slot: Int, bytes: [UInt8])
    case pwrite(slot: Int, bytes: [UInt8], offset: Int)
    case lseek(slot: Int, offset: Int, whence: Int32)
    case ftruncate(slot: Int, length: Int)
    case truncate(name: String, length: Int)
    case rename(from: String, to: String)
    case unlink(name: String)
    case fsync(slot: Int)
    /// mmap(MAP_SHARED) of a page-aligned region inside the file (chosen from the file's size by
    /// `page` and `length`), read it; with `bytes`, write them at `at` in the region and msync.
    case mmap(slot: Int, page: Int, length: Int, bytes: [UInt8]?, at: Int)
    /// echo 2 > /proc/sys/vm/drop_caches: the kernel forgets unused dentries and inodes, so the
    /// next lookup asks the file system for the inode number again.
    case dropCaches

    var slot: Int? {
        switch self {
        case .open(let slot, _, _), .close(let slot), .reopen(let slot), .read(let slot, _), .pread(let slot, _, _),
            .write(let slot, _), .pwrite(let slot, _, _), .lseek(let slot, _, _), .ftruncate(let slot, _),
            .fsync(let slot), .mmap(let slot, _, _, _, _):
            return slot
        case .truncate, .rename, .unlink, .dropCaches: return nil
        }
    }

    /// The operation's name, for failure signatures.
    var kind: String { String(description.prefix { $0 != "#" && $0 != " " }) }

    var description: String {
        switch self {
        case .open(let slot, let name, let flags): "open#\(slot) \(name) \(ModelOp.flagText(flags))"
        case .close(let slot): "close#\(slot)"
        case .reopen(let slot): "reopen#\(slot)"
        case .read(let slot, let count): "read#\(slot) \(count)"
        case .pread(let slot, let count, let offset): "pread#\(slot) \(count)@\(offset)"
        case .write(let slot, let bytes): "write#\(slot) \(ModelOp.bytesText(bytes))"
        case .pwrite(let slot, let bytes, let offset): "pwrite#\(slot) \(ModelOp.bytesText(bytes))@\(offset)"
        case .lseek(let slot, let offset, let whence):
            "lseek#\(slot) \(offset) \(whence == SEEK_SET ? "SET" : whence == SEEK_CUR ? "CUR" : "END")"
        case .ftruncate(let slot, let length): "ftruncate#\(slot) \(length)"
        case .truncate(let name, let length): "truncate \(name) \(length)"
        case .rename(let from, let to): "rename \(from) \(to)"
        case .unlink(let name): "unlink \(name)"
        case .fsync(let slot): "fsync#\(slot)"
        case .mmap(let slot, let page, let length, let bytes, let at):
            "mmap#\(slot) p\(page) \(length)" + (bytes.map { " w\(ModelOp.bytesText($0))@\(at)" } ?? " r")
        case .dropCaches: "drop_caches"
        }
    }

    static func flagText(_ flags: Int32) -> String {
        var parts = [flags & O_ACCMODE == O_RDONLY ? "R" : flags & O_ACCMODE == O_WRONLY ? "W" : "RW"]
        for (flag, name) in [(O_CREAT, "C"), (O_EXCL, "X"), (O_TRUNC, "T"), (O_APPEND, "A")] where flags & flag != 0 {
            parts.append(name)
        }
        return parts.joined(separator: "|")
    }

    /// `"text"` for short printable bytes, else `<n bytes>`.
    static func bytesText(_ bytes: [UInt8]) -> String {
        if bytes.count <= 12, bytes.allSatisfy({ (0x20...0x7e).contains($0) && $0 != 0x22 }) {
            return "\"" + String(decoding: bytes, as: UTF8.self) + "\""
        }
        return "<\(bytes.count)B>"
    }
}

/// What one call answered: a code (a return value or an errno name) and the bytes it read.
struct Outcome: Equatable, CustomStringConvertible {
    var code: String
    var bytes: [UInt8] = []

    static func errno(_ number: Int32 = Glibc.errno) -> Outcome { Outcome(code: errnoName(number)) }
    static func result(_ value: Int) -> Outcome { value < 0 ? .errno() : Outcome(code: "\(value)") }

    var description: String { bytes.isEmpty ? code : "\(code) \(ModelSnapshot.preview(bytes))" }
}

func errnoName(_ number: Int32) -> String {
    let names: [Int32: String] = [
        EPERM: "EPERM", ENOENT: "ENOENT", EIO: "EIO", EBADF: "EBADF", EACCES: "EACCES", EBUSY: "EBUSY",
        EEXIST: "EEXIST", EXDEV: "EXDEV", ENODEV: "ENODEV", EISDIR: "EISDIR", EINVAL: "EINVAL", EFBIG: "EFBIG",
        ENOSPC: "ENOSPC", ESPIPE: "ESPIPE", EROFS: "EROFS", ENOTEMPTY: "ENOTEMPTY", ENOTSUP: "ENOTSUP",
        ENOTCONN: "ENOTCONN", ENXIO: "ENXIO", ENOSYS: "ENOSYS", ESTALE: "ESTALE", ENODATA: "ENODATA",
    ]
    return names[number] ?? "errno\(number)"
}

/// What a name or a descriptor looks like after a step. Compared whole between the worlds; inode
/// numbers are kept beside it (they differ by design), for the identity checks.
struct ModelSnapshot: Equatable {
    struct Entry: Equatable {
        /// "missing ENOENT", or the file type and link count ("file nlink 1").
        var status: String
        var size: Int
        /// Nil when not read (a write-only descriptor, or a step that skips reading names).
        var content: [UInt8]?
    }

    var listing: [String]
    var names: [String: Entry]
    var slots: [Entry?]

    /// Inode numbers: of each name that exists, and of each open descriptor.
    var nameInodes: [String: UInt64] = [:]
    var slotInodes: [UInt64?] = []

    static func == (a: ModelSnapshot, b: ModelSnapshot) -> Bool {
        a.listing == b.listing && a.names == b.names && a.slots == b.slots
    }

    /// The first difference, in words.
    /// The first difference: a kind (for failure signatures) and words.
    static func difference(_ mount: ModelSnapshot, _ local: ModelSnapshot) -> (kind: String, text: String) {
        if mount.listing != local.listing { return ("listing", "listing: mount \(mount.listing), local \(local.listing)") }
        for name in local.names.keys.sorted() where mount.names[name] != local.names[name] {
            let (kind, text) = entryDifference(mount.names[name], local.names[name])
            return ("name " + kind, "name \(name): " + text)
        }
        for slot in local.slots.indices where mount.slots[slot] != local.slots[slot] {
            let (kind, text) = entryDifference(mount.slots[slot], local.slots[slot])
            return ("descriptor " + kind, "descriptor #\(slot): " + text)
        }
        return ("none", "none")
    }

    static func entryDifference(_ mount: Entry?, _ local: Entry?) -> (String, String) {
        guard let mount, let local else { return ("presence", "mount \(String(describing: mount)), local \(String(describing: local))") }
        if mount.status != local.status || mount.size != local.size {
            return (mount.status != local.status ? "status" : "size", "mount \(mount.status) size \(mount.size), local \(local.status) size \(local.size)")
        }
        guard let a = mount.content, let b = local.content else {
            return ("content", "content read on one side only (mount \(mount.content != nil), local \(local.content != nil))")
        }
        let first = zip(a, b).enumerated().first { $0.element.0 != $0.element.1 }?.offset ?? min(a.count, b.count)
        let window = max(0, first - 8)..<first + 24
        func around(_ bytes: [UInt8]) -> String {
            preview(Array(bytes[min(window.lowerBound, bytes.count)..<min(window.upperBound, bytes.count)]))
        }
        return ("content", "content (mount \(a.count) bytes, local \(b.count) bytes) first differs at \(first): mount \(around(a)), local \(around(b))")
    }

    /// Bytes as an escaped string, long runs of zeros shortened.
    static func preview(_ bytes: [UInt8], limit: Int = 80) -> String {
        var text = ""
        var index = 0
        while index < bytes.count, text.count < limit {
            let byte = bytes[index]
            if byte == 0 {
                var end = index
                while end < bytes.count, bytes[end] == 0 { end += 1 }
                text += end - index > 3 ? "\\0×\(end - index)" : String(repeating: "\\0", count: end - index)
                index = end
                continue
            }
            text += (0x20...0x7e).contains(byte) && byte != 0x5c ? String(UnicodeScalar(byte)) : String(format: "\\x%02x", byte)
            index += 1
        }
        if index < bytes.count { text += "…(\(bytes.count) bytes)" }
        return "\"" + text + "\""
    }
}

/// One side: a directory and the descriptors opened in it, slot by slot.
final class ModelWorld {
    struct Slot {
        var fd: Int32
        var name: String
        var flags: Int32
    }

    let directory: String
    private(set) var slots: [Slot?]
    /// Whether `.dropCaches` really drops them (done once per step, by the mount's world).
    let dropsCaches: Bool

    init(directory: String, slotCount: Int, dropsCaches: Bool) {
        self.directory = directory
        slots = Array(repeating: nil, count: slotCount)
        self.dropsCaches = dropsCaches
    }

    func path(_ name: String) -> String { directory + "/" + name }

    func perform(_ op: ModelOp) -> Outcome {
        if let slot = op.slot, slot < slots.count {
            if case .open = op {
                // Only a shortened sequence (shrinking) opens into a used slot.
                if slots[slot] != nil { return Outcome(code: "slot in use") }
            } else if slots[slot] == nil {
                return Outcome(code: "no descriptor")
            }
        }
        switch op {
        case .open(let slot, let name, let flags):
            return open(slot: slot, name: name, flags: flags)
        case .close(let slot):
            let fd = slots[slot]!.fd
            slots[slot] = nil
            return .result(Int(Glibc.close(fd)))
        case .reopen(let slot):
            let old = slots[slot]!
            slots[slot] = nil
            let closed = Glibc.close(old.fd) == 0 ? "0" : errnoName(Glibc.errno)
            let opened = open(slot: slot, name: old.name, flags: old.flags & ~O_EXCL)
            return Outcome(code: "close \(closed), open \(opened.code)")
        case .read(let slot, let count):
            var buffer = [UInt8](repeating: 0, count: count)
            let got = buffer.withUnsafeMutableBytes { Glibc.read(slots[slot]!.fd, $0.baseAddress, count) }
            return got < 0 ? .errno() : Outcome(code: "\(got)", bytes: Array(buffer[0..<got]))
        case .pread(let slot, let count, let offset):
            var buffer = [UInt8](repeating: 0, count: count)
            let got = buffer.withUnsafeMutableBytes { Glibc.pread(slots[slot]!.fd, $0.baseAddress, count, off_t(offset)) }
            return got < 0 ? .errno() : Outcome(code: "\(got)", bytes: Array(buffer[0..<got]))
        case .write(let slot, let bytes):
            return .result(bytes.withUnsafeBytes { Glibc.write(slots[slot]!.fd, $0.baseAddress, bytes.count) })
        case .pwrite(let slot, let bytes, let offset):
            return .result(bytes.withUnsafeBytes { Glibc.pwrite(slots[slot]!.fd, $0.baseAddress, bytes.count, off_t(offset)) })
        case .lseek(let slot, let offset, let whence):
            return .result(Int(Glibc.lseek(slots[slot]!.fd, off_t(offset), whence)))
        case .ftruncate(let slot, let length):
            return .result(Int(Glibc.ftruncate(slots[slot]!.fd, off_t(length))))
        case .truncate(let name, let length):
            return .result(Int(Glibc.truncate(path(name), off_t(length))))
        case .rename(let from, let to):
            return .result(Int(Glibc.rename(path(from), path(to))))
        case .unlink(let name):
            return .result(Int(Glibc.unlink(path(name))))
        case .fsync(let slot):
            return .result(Int(Glibc.fsync(slots[slot]!.fd)))
        case .mmap(let slot, let page, let length, let bytes, let at):
            return mapped(fd: slots[slot]!.fd, page: page, length: length, bytes: bytes, at: at)
        case .dropCaches:
            if dropsCaches {
                let fd = Glibc.open("/proc/sys/vm/drop_caches", O_WRONLY)
                if fd >= 0 {
                    _ = Glibc.write(fd, "2", 1)
                    Glibc.close(fd)
                }
            }
            return Outcome(code: "done")
        }
    }

    private func open(slot: Int, name: String, flags: Int32) -> Outcome {
        let fd = Glibc.open(path(name), flags | O_CLOEXEC, 0o644)
        guard fd >= 0 else { return .errno() }
        slots[slot] = Slot(fd: fd, name: name, flags: flags)
        return Outcome(code: "fd")
    }

    private func mapped(fd: Int32, page: Int, length: Int, bytes: [UInt8]?, at: Int) -> Outcome {
        var info = stat()
        guard fstat(fd, &info) == 0 else { return .errno() }
        let size = Int(info.st_size)
        guard size > 0 else { return Outcome(code: "empty") }
        let pageSize = Int(sysconf(Int32(_SC_PAGESIZE)))
        let offset = (page % ((size - 1) / pageSize + 1)) * pageSize
        let count = min(length, size - offset)
        let protection = bytes == nil ? PROT_READ : PROT_READ | PROT_WRITE
        guard let region = Glibc.mmap(nil, count, protection, MAP_SHARED, fd, off_t(offset)),
            region != UnsafeMutableRawPointer(bitPattern: -1)
        else { return .errno() }
        defer { munmap(region, count) }
        let seen = Array(UnsafeRawBufferPointer(start: region, count: count))
        guard let bytes else { return Outcome(code: "mapped \(offset)+\(count)", bytes: seen) }
        let start = at % count
        let written = min(bytes.count, count - start)
        bytes.withUnsafeBytes { (region + start).copyMemory(from: $0.baseAddress!, byteCount: written) }
        let synced = msync(region, count, MS_SYNC) == 0 ? "0" : errnoName(Glibc.errno)
        return Outcome(code: "mapped \(offset)+\(count) wrote \(written) msync \(synced)", bytes: seen)
    }

    /// Every name's status, size and (if `readNames`) bytes, the listing, and each descriptor's
    /// fstat and (if readable) bytes by pread. Reading a name opens and closes it, which on the
    /// mount saves the file: `readNames` false leaves unsaved bytes unsaved across the step.
    func snapshot(names: [String], readNames: Bool) -> ModelSnapshot {
        var result = ModelSnapshot(listing: listing(), names: [:], slots: [])
        for name in names {
            var info = stat()
            guard lstat(path(name), &info) == 0 else {
                result.names[name] = .init(status: "missing \(errnoName(Glibc.errno))", size: 0, content: nil)
                continue
            }
            result.nameInodes[name] = UInt64(info.st_ino)
            var content: [UInt8]?
            if readNames {
                let fd = Glibc.open(path(name), O_RDONLY | O_CLOEXEC)
                if fd >= 0 {
                    content = Self.readAll(fd)
                    Glibc.close(fd)
                } else {
                    content = Array("open: \(errnoName(Glibc.errno))".utf8)
                }
            }
            result.names[name] = .init(status: Self.status(info), size: Int(info.st_size), content: content)
        }
        for slot in slots {
            guard let slot else {
                result.slots.append(nil)
                result.slotInodes.append(nil)
                continue
            }
            var info = stat()
            guard fstat(slot.fd, &info) == 0 else {
                result.slots.append(.init(status: "fstat \(errnoName(Glibc.errno))", size: 0, content: nil))
                result.slotInodes.append(nil)
                continue
            }
            let readable = slot.flags & O_ACCMODE != O_WRONLY
            result.slots.append(.init(status: Self.status(info), size: Int(info.st_size), content: readable ? Self.readAll(slot.fd) : nil))
            result.slotInodes.append(UInt64(info.st_ino))
        }
        return result
    }

    /// The file type and link count; permission bits, times and st_blocks differ by design.
    private static func status(_ info: stat) -> String {
        let type = info.st_mode & S_IFMT == S_IFREG ? "file" : "type \(info.st_mode & S_IFMT)"
        return "\(type) nlink \(info.st_nlink)"
    }

    /// The whole file by pread from 0 (the descriptor's position does not move).
    private static func readAll(_ fd: Int32) -> [UInt8] {
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let got = chunk.withUnsafeMutableBytes { Glibc.pread(fd, $0.baseAddress, 65536, off_t(bytes.count)) }
            if got < 0 { return bytes + Array("<pread: \(errnoName(Glibc.errno))>".utf8) }
            if got == 0 { return bytes }
            bytes += chunk[0..<got]
            if bytes.count > 1 << 22 { return bytes + Array("<too long>".utf8) }
        }
    }

    private func listing() -> [String] {
        guard let dir = opendir(directory) else { return ["<opendir: \(errnoName(Glibc.errno))>"] }
        defer { closedir(dir) }
        var names: [String] = []
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(cString: raw.bindMemory(to: CChar.self).baseAddress!)
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names.sorted()
    }

    /// The inode number of the file open in `slot`.
    func inode(slot: Int) -> UInt64? {
        var info = stat()
        guard let open = slots[slot], fstat(open.fd, &info) == 0 else { return nil }
        return UInt64(info.st_ino)
    }

    /// Whether a descriptor is open on the file `name` now names.
    func isOpen(_ name: String) -> Bool {
        var named = stat()
        guard lstat(path(name), &named) == 0 else { return false }
        return slots.contains { slot in
            var info = stat()
            guard let slot, fstat(slot.fd, &info) == 0 else { return false }
            return info.st_ino == named.st_ino && info.st_dev == named.st_dev
        }
    }

    /// Closes every descriptor (before the mount is unmounted: open files keep it busy).
    func closeAll() {
        for index in slots.indices {
            if let slot = slots[index] { Glibc.close(slot.fd) }
            slots[index] = nil
        }
    }
}
