import ApptimistCrypto
import ApptimistProtocol
import Foundation
import JSONDiff
import Logging
import SyncEngine
import SyncStore

extension ApptimistClient {
    /// READ of every file the store knows and of the service's access-control files: each one
    /// read is the file's state now; a known file the service no longer has is removed.
    func refreshFiles() async throws {
        var names = Set(ApptimistBuckets.reservedFiles)
        for key in try entityKeys(ApptimistBuckets.files) { names.insert(ApptimistFileName.name(ofKey: key)) }
        for name in names.sorted() { try await readFile(name) }
    }

    /// READ of one file, its answer applied as the service's state of it now (absent: removed).
    private func readFile(_ name: String, noticed: Bool = false) async throws {
        let bucket = ApptimistBuckets.files
        guard let filename = ApptimistFileName.wireName(name) else { return }
        let answer = try await request(
            .read(ApptimistFileFields(publicKey: configuration.identity.box.publicKey, filename: filename)),
            answer: AnswerKey(type: .read, subject: filename))
        let key = ApptimistFileName.key(of: name)
        if noticed { logger.debug("apptimist: READ \(name) (a notice named it), error \(answer.error)") }
        if answer.error == 0 {
            try mirror.apply(state: Self.fileFormat.value(of: answer.data), key: key, bucket: bucket)
        } else if ApptimistFileName.isNotFound(answer.error) {
            try mirror.remove(key: key, bucket: bucket)
        } else {
            logger.info("apptimist: READ \(name): \(answer.reason)")
        }
    }

    /// A notice named a file whose bytes the store does not have: the flush READs it. Kept in
    /// the store (the head has moved past the notice) until read.
    func noteFileToRead(_ key: String) {
        guard !filesToRead.contains(key) else { return }
        filesToRead.append(key)
        saveFilesToRead()
        if connection != nil, refreshed { Task { await self.flush() } }
    }

    func saveFilesToRead() {
        do {
            try store.setEngineSetting(Self.filesToReadSetting, to: filesToRead.joined(separator: "\n"))
        } catch {
            logger.error("apptimist: cannot keep the files to read: \(error)")
        }
    }

    static func filesToRead(in store: SyncStore) -> [String] {
        let kept: String? = (try? store.engineSetting(filesToReadSetting)) ?? nil
        return (kept ?? "").split(separator: "\n").map(String.init)
    }

    /// The files notices named, READ one at a time.
    private func readNoticedFiles() async throws {
        while let key = filesToRead.first {
            guard connection != nil, refreshed else { return }
            try await readFile(ApptimistFileName.name(ofKey: key), noticed: true)
            filesToRead.removeAll { $0 == key }
            saveFilesToRead()
        }
    }

    /// Sends what the store owes, oldest first per bucket, one request at a time. Stops at a
    /// failure that is not the change's own (the connection): the rest goes after a reconnect.
    func flush() async {
        guard !sending else {
            flushAgain = true
            return
        }
        sending = true
        defer { sending = false }
        repeat {
            flushAgain = false
            do { try await takeWantedLocks() } catch {
                logger.warning("apptimist: a LOCK waits for the next connection: \(error)")
                return
            }
            do { try await readNoticedFiles() } catch {
                logger.warning("apptimist: reading the files notices named waits for the next connection: \(error)")
                return
            }
            for bucket in ApptimistBuckets.all {
                let owed: [OutgoingChange]
                do { owed = try store.outgoingChanges(bucket: bucket) } catch {
                    logger.error("apptimist: cannot read what \(bucket) owes: \(error)")
                    continue
                }
                for change in owed {
                    if case .rejected = change.state { continue }
                    guard connection != nil, refreshed else { return }
                    do {
                        try await send(change)
                    } catch {
                        logger.warning("apptimist: \(change.bucket)/\(change.key) waits to be sent: \(error)")
                        return
                    }
                }
            }
        } while flushAgain
    }

    /// The LOCKs of files opened for writing, before what is owed: a lock held by another
    /// connection shows on the file at once (`rejected:16`), before the user saves; the save
    /// still goes (and LOCKs again), and is refused then if the lock is still held.
    private func takeWantedLocks() async throws {
        while !locksWanted.isEmpty {
            guard connection != nil, refreshed else {
                locksWanted = []
                return
            }
            let key = locksWanted.removeFirst()
            let name = ApptimistFileName.name(ofKey: key)
            guard !ApptimistBuckets.reservedFiles.contains(name), !holdsLock(key), let filename = ApptimistFileName.wireName(name)
            else { continue }
            // Saved already (closed before its LOCK went): the save LOCKs and WRITEs, and a LOCK
            // taken after that WRITE would hold the file for nobody.
            if try store.outgoingChanges(bucket: ApptimistBuckets.files).contains(where: { change in
                if case .rejected = change.state { return false }
                return change.key == key
            }) { continue }
            let fields = ApptimistFileFields(publicKey: configuration.identity.box.publicKey, filename: filename)
            let answer = try await request(.lock(fields), answer: AnswerKey(type: .lock, subject: filename))
            if answer.error == 0 || ApptimistFileName.isNotFound(answer.error) {
                heldLocks[key] = .now
                logger.info("apptimist: LOCK \(name): held (opened for writing)")
            } else {
                let reason = "LOCK refused when opened for writing: \(answer.reason)"
                logger.error("apptimist: refused, \(ApptimistBuckets.files)/\(key): \(reason)")
                try store.refuseEntity(bucket: ApptimistBuckets.files, key: key, code: Int(answer.error), reason: reason)
            }
        }
    }

    /// How long a lock taken here is relied on: the service keeps one 5 minutes; past this the
    /// save LOCKs again.
    static let lockLifetime: Duration = .seconds(240)

    func holdsLock(_ key: String) -> Bool {
        heldLocks[key].map { ContinuousClock.now - $0 < Self.lockLifetime } ?? false
    }

    private func send(_ change: OutgoingChange) async throws {
        switch change.bucket {
        case ApptimistBuckets.files: try await sendFile(change)
        case ApptimistBuckets.messages: try await sendMessageRemoval(change)
        case ApptimistBuckets.outbox: try await sendOutbox(change)
        default: try refuse(change, code: 400, "not an Apptimist bucket: nothing is sent from it")
        }
    }

    /// A saved file: LOCK (unless held since it was opened), then WRITE of its whole bytes; a
    /// removed one: REMOVE. A refusal
    /// (the lock held by another, no right to write) marks the save rejected, bytes kept.
    private func sendFile(_ change: OutgoingChange) async throws {
        let name = ApptimistFileName.name(ofKey: change.key)
        if ApptimistBuckets.reservedFiles.contains(name) {
            return try refuse(change, code: 403, "\(name) is an access-control file the service keeps: it is read here, never written")
        }
        guard let filename = ApptimistFileName.wireName(name) else {
            return try refuse(change, code: 400, "\(name) is no Apptimist file name (1 to 255 bytes, no `/`)")
        }
        let fields = ApptimistFileFields(publicKey: configuration.identity.box.publicKey, filename: filename)
        guard let value = try mirror.value(sentBy: change) else {
            let answer = try await request(.remove(fields), answer: AnswerKey(type: .remove, subject: filename))
            heldLocks[change.key] = nil
            guard answer.error == 0 || ApptimistFileName.isNotFound(answer.error) else {
                return try refuse(change, code: Int(answer.error), "REMOVE refused: \(answer.reason)")
            }
            try acknowledge(change)
            return
        }
        let bytes = Self.fileFormat.bytes(of: value) ?? []
        // Taken when the file was opened for writing, and still held: WRITE at once.
        if !holdsLock(change.key) {
            let lock = try await request(.lock(fields), answer: AnswerKey(type: .lock, subject: filename))
            guard lock.error == 0 || ApptimistFileName.isNotFound(lock.error) else {
                return try refuse(change, code: Int(lock.error), "LOCK refused: \(lock.reason)")
            }
        }
        // The WRITE ends the lock (as does a refused one: the next save LOCKs again).
        heldLocks[change.key] = nil
        let written = try await request(.write(fields), answer: AnswerKey(type: .write, subject: filename), data: bytes)
        guard written.error == 0 else {
            return try refuse(change, code: Int(written.error), "WRITE refused: \(written.reason)")
        }
        try acknowledge(change)
    }

    /// A message file removed: TRUNCATE, done when the service echoes it. Messages cannot be
    /// changed (the view keeps such bytes locally); a change that gets here anyway is refused.
    private func sendMessageRemoval(_ change: OutgoingChange) async throws {
        guard case .remove = change.operation else {
            return try refuse(change, code: 403, "a message cannot be changed: its bytes are what was sent")
        }
        guard let id = ApptimistHex.decode(change.key), id.count == 64 else {
            try acknowledge(change)
            return
        }
        _ = try await request(.truncate(messageID: id), answer: AnswerKey(type: .truncate, subject: id))
        // The echo removed it from the store already (as it does for the user's other devices).
        if let entity = try store.entity(bucket: change.bucket, key: change.key), entity.version != nil, !entity.deletedPending {
            try acknowledge(change)
        }
    }

    /// A file saved in the outbox: one MESSAGE per recipient it names, each sealed for that
    /// recipient. It stays (state sent) until the service echoes it; it then moves into messages.
    private func sendOutbox(_ change: OutgoingChange) async throws {
        guard let value = try mirror.value(sentBy: change) else {
            // Removed before it went (or after its echo): nothing to tell the service.
            try acknowledge(change)
            return
        }
        // Sent on this connection: its echo is on the way. Sent on an earlier one and not echoed
        // (replayed after head) by now: sent again (a message goes at least once).
        if sentOnThisConnection.contains(change.ccid) { return }
        let data = Self.fileFormat.bytes(of: value) ?? []
        let recipients: [[UInt8]]
        switch OutboxRecipients.parse(data) {
        case .success(let keys): recipients = keys
        case .failure(let problem): return try refuse(change, code: 400, problem.description)
        }
        let me = configuration.identity.box.publicKey
        let time = UInt64(max(0, Date().timeIntervalSince1970))
        // Marked before it goes: the echo may be handled while the last PDU is being written.
        try store.markSent(ccids: [change.ccid])
        for recipient in recipients {
            try await write(.message(time: time, recipient: recipient, to: recipient, from: me), data: data, for: recipient)
        }
        sentOnThisConnection.insert(change.ccid)
    }

    /// One of this user's messages came back from the service: the outbox file holding those
    /// bytes has gone out, and leaves the outbox (the message shows in messages/).
    func outboxEchoed(_ data: [UInt8]) throws {
        let bucket = ApptimistBuckets.outbox
        for key in try entityKeys(bucket) {
            guard let entity = try store.entity(bucket: bucket, key: key), let value = entity.value,
                Self.fileFormat.bytes(of: value) == data
            else { continue }
            for change in try store.outgoingChanges(bucket: bucket) where change.key == key {
                try acknowledge(change)
            }
            try mirror.remove(key: key, bucket: bucket)
            return
        }
    }

    /// Every entity of the bucket, sent or not (the store's index holds only what the server has).
    private func entityKeys(_ bucket: String) throws -> [String] {
        try store.entries(bucket: bucket).compactMap { entry in
            if case .entity(let key) = entry.name { return key }
            return nil
        }
    }

    private func acknowledge(_ change: OutgoingChange) throws {
        if try mirror.acknowledge(change) { flushAgain = true }
    }

    private func refuse(_ change: OutgoingChange, code: Int, _ reason: String) throws {
        logger.error("apptimist: refused, \(change.bucket)/\(change.key): \(reason)")
        try store.refuse(ccid: change.ccid, code: code, reason: reason)
    }
}

/// File names on the service and entity keys in the store. A key is the name with every byte
/// outside `[A-Za-z0-9._@-]` as `%XX` (as the file system names keys), so `my file` is the key
/// `my%20file` and shows as `files/my file`.
enum ApptimistFileName {
    private static let plain = CharacterSet(charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._@-")

    static func key(of name: String) -> String {
        name.addingPercentEncoding(withAllowedCharacters: plain) ?? name
    }

    static func name(ofKey key: String) -> String {
        key.removingPercentEncoding ?? key
    }

    /// The name as the protocol carries it: a Linux file name, not a path.
    static func wireName(_ name: String) -> [UInt8]? {
        let bytes = Array(name.utf8)
        guard !bytes.isEmpty, bytes.count <= 255, !bytes.contains(UInt8(ascii: "/")), !bytes.contains(0), name != ".", name != ".."
        else { return nil }
        return bytes
    }

    /// The codes a service answers for a file it does not have (ENOENT, HTTP's 404).
    static func isNotFound(_ error: UInt16) -> Bool { error == 2 || error == 404 }
}

/// Who an outbox file goes to: its first line, `To: KEY[, KEY...]`, each KEY a recipient's
/// public encryption key as 64 hex digits. The whole file, that line included, is the message.
public enum OutboxRecipients {
    public struct Problem: Error, CustomStringConvertible, Sendable {
        public let description: String
    }

    public static func parse(_ data: [UInt8]) -> Result<[[UInt8]], Problem> {
        let firstLine = data.prefix { $0 != UInt8(ascii: "\n") }
        let line = String(decoding: firstLine, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        guard line.lowercased().hasPrefix("to:") else {
            return .failure(Problem(description: "no recipients: an outbox file starts with a line `To: KEY[, KEY...]` (public keys, 64 hex digits)"))
        }
        var keys: [[UInt8]] = []
        for part in line.dropFirst(3).split(whereSeparator: { $0 == "," || $0 == " " }) where !part.isEmpty {
            guard let key = ApptimistHex.decode(String(part)), key.count == 32 else {
                return .failure(Problem(description: "`\(part)` is no recipient: a public key is 64 hex digits"))
            }
            if !keys.contains(key) { keys.append(key) }
        }
        guard !keys.isEmpty else { return .failure(Problem(description: "the To: line names no recipient")) }
        return .success(keys)
    }
}
