import Foundation
import Glibc
import Synchronization

/// The working copy of a large open file, kept in an unlinked temporary file on the store's disk
/// instead of memory: the mount's memory does not grow with the files it holds open.
///
/// Its lock orders the changes to it with a save reading it whole (a save streams it to the
/// store under the lock, so it sees no half-done write). The lock is never taken while holding
/// the file system's state lock; the state lock may be taken inside it.
final class SpillFile: @unchecked Sendable {
    private let lock = NSLock()
    private let descriptor: Int32
    /// The file's length; changed only under the lock.
    private(set) var size = 0

    /// A new, empty, already unlinked file in `directory` (its space goes with the last descriptor).
    init(directory: String) throws(FSError) {
        var template = Array((directory + "/.bucketfs-working-XXXXXX").utf8CString)
        let descriptor = template.withUnsafeMutableBufferPointer { $0.baseAddress.map { mkstemp($0) } ?? -1 }
        guard descriptor >= 0 else { throw Self.error("cannot create a working copy in \(directory)") }
        _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC)
        template.withUnsafeBufferPointer { _ = $0.baseAddress.map { Glibc.unlink($0) } }
        self.descriptor = descriptor
    }

    deinit {
        Glibc.close(descriptor)
    }

    func withLock<T, E: Error>(_ body: () throws(E) -> T) throws(E) -> T {
        lock.lock()
        defer { lock.unlock() }
        return try body()
    }

    /// pwrite(2), growing the file (a gap is a hole that reads as zeros). Under the lock.
    func write(_ data: UnsafeRawBufferPointer, at offset: Int) throws(FSError) {
        var done = 0
        while done < data.count {
            guard let base = data.baseAddress else { return }
            let written = pwrite(descriptor, base + done, data.count - done, off_t(offset + done))
            if written < 0 && errno == EINTR { continue }
            guard written > 0 else { throw Self.error("write to a working copy failed") }
            done += written
        }
        size = max(size, offset + data.count)
    }

    /// Fills `buffer` with the bytes at `offset`, zeros past the end. Safe without the lock
    /// (a read racing a write sees either bytes, as on a local file).
    func read(into buffer: UnsafeMutableRawBufferPointer, at offset: Int) throws(FSError) {
        var done = 0
        while done < buffer.count {
            guard let base = buffer.baseAddress else { return }
            let count = pread(descriptor, base + done, buffer.count - done, off_t(offset + done))
            if count < 0 && errno == EINTR { continue }
            guard count >= 0 else { throw Self.error("read of a working copy failed") }
            if count == 0 {
                memset(base + done, 0, buffer.count - done)
                return
            }
            done += count
        }
    }

    /// `write(_:at:)` of an array's bytes.
    func write(_ bytes: [UInt8], at offset: Int) throws(FSError) {
        try bytes.withUnsafeBytes { buffer in Result { () throws(FSError) in try write(buffer, at: offset) } }.get()
    }

    /// `count` bytes at `offset` (zeros past the end).
    func read(count: Int, at offset: Int) throws(FSError) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        try bytes.withUnsafeMutableBytes { buffer in Result { () throws(FSError) in try read(into: buffer, at: offset) } }.get()
        return bytes
    }

    /// truncate(2). Under the lock.
    func resize(to newSize: Int) throws(FSError) {
        guard ftruncate(descriptor, off_t(newSize)) == 0 else { throw Self.error("truncate of a working copy failed") }
        size = newSize
    }

    private static func error(_ what: String) -> FSError {
        errno == ENOSPC || errno == EDQUOT ? .noSpace : .io("\(what): \(String(cString: strerror(errno)))")
    }
}

/// A large file opened without changes: reads come from the store's chunks, a range at a time
/// (the chunk read last is kept, so sequential reads fetch each chunk once).
final class StoredContentReader: Sendable {
    let content: MountStoredContent
    private let lastChunk = Mutex<(index: Int, bytes: [UInt8])?>(nil)

    init(_ content: MountStoredContent) {
        self.content = content
    }

    func read(offset: Int, count: Int, from backend: any MountBackend) throws(FSError) -> [UInt8] {
        let chunkSize = backend.chunkSize
        let end = min(content.size, offset + count)
        var result: [UInt8] = []
        result.reserveCapacity(max(end - offset, 0))
        var position = offset
        while position < end {
            let index = position / chunkSize
            let chunk = try self.chunk(index, from: backend)
            let start = position - index * chunkSize
            let stop = min(chunk.count, end - index * chunkSize)
            guard start < stop else { break }
            result.append(contentsOf: chunk[start..<stop])
            position = index * chunkSize + stop
        }
        return result
    }

    private func chunk(_ index: Int, from backend: any MountBackend) throws(FSError) -> [UInt8] {
        if let cached = lastChunk.withLock({ $0 }), cached.index == index { return cached.bytes }
        let bytes = try backend.readChunk(of: content, index: index)
        lastChunk.withLock { $0 = (index, bytes) }
        return bytes
    }
}
