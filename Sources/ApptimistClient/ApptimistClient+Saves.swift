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

    /// Sends what the store owes, oldest first per bucket: files and outbox messages pipelined
    /// (`sendFiles`, `sendOutbox`), removed messages one at a time. Stops at a failure that is
    /// not the change's own (the connection): the rest goes after a reconnect.
    func flush() async {
        guard !sending else {
            flushAgain = true
            return
        }
        sending = true
        // A flush asked for while this one ran is done after it, also when this one stopped at
        // a connection's end: the ask may be the next connection's, after its login (it found
        // this one still sending, and nothing else would send what is owed on it).
        repeat {
            flushAgain = false
            await sendOwed()
        } while flushAgain && !Task.isCancelled
        sending = false
        // Not in this task once it is cancelled (a login's flush, when its connection ended):
        // there every answer awaited ends at once, so the next connection's requests would go
        // out with nobody to take their answers, and what they carry would wait for the
        // connection after it.
        if flushAgain {
            flushAgain = false
            Task { await self.flush() }
        }
    }

    /// One pass of `flush`; returns at the first failure that is not a change's own.
    private func sendOwed() async {
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
            do {
                owed = try store.outgoingChanges(bucket: bucket).filter { change in
                    if case .rejected = change.state { return false }
                    return true
                }
            } catch {
                logger.error("apptimist: cannot read what \(bucket) owes: \(error)")
                continue
            }
            do {
                switch bucket {
                case ApptimistBuckets.files: guard try await sendFiles(owed) else { return }
                case ApptimistBuckets.outbox: guard try await sendOutbox(owed) else { return }
                default:
                    for change in owed {
                        guard connection != nil, refreshed else { return }
                        try await send(change)
                    }
                }
            } catch {
                logger.warning("apptimist: what \(bucket) owes waits to be sent: \(error)")
                return
            }
        }
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
        case ApptimistBuckets.messages: try await sendMessageRemoval(change)
        default: try refuse(change, code: 400, "not an Apptimist bucket: nothing is sent from it")
        }
    }

    /// How many files' requests are in flight at once.
    static let filesInFlight = 32

    /// Saved and removed files, up to `filesInFlight` at a time: each saved file LOCKed (unless
    /// held since it was opened), then WRITten whole; each removed one REMOVEd. The requests of
    /// a batch go out without waiting for each other's answers (the service answers in order;
    /// each answer finds its request by type and file name): a LOCK's answer sends its file's
    /// WRITE, and every save is acknowledged by its own WRITE's answer only. A refusal (the lock
    /// held by another, no right to write) marks that save rejected, bytes kept. False when the
    /// connection is gone: the rest waits for the next one.
    private func sendFiles(_ owed: [OutgoingChange]) async throws -> Bool {
        var rest = owed[...]
        while !rest.isEmpty {
            guard connection != nil, refreshed else { return false }
            // One change per file in a batch: a file's next change goes after its answer.
            var batch: [OutgoingChange] = []
            var keys: Set<String> = []
            while let change = rest.first, batch.count < Self.filesInFlight, keys.insert(change.key).inserted {
                batch.append(change)
                rest.removeFirst()
            }
            try await sendFileBatch(batch)
        }
        return true
    }

    private enum FileStep {
        case remove(PendingAnswer)
        case lock(PendingAnswer, ApptimistFileFields, [UInt8])
        case write(ApptimistFileFields, [UInt8])

        var pending: PendingAnswer? {
            switch self {
            case .remove(let pending), .lock(let pending, _, _): return pending
            case .write: return nil
            }
        }
    }

    private func sendFileBatch(_ batch: [OutgoingChange]) async throws {
        var steps: [(OutgoingChange, FileStep)] = []
        var writes: [(OutgoingChange, PendingAnswer)] = []
        defer {
            for (_, step) in steps { step.pending?.cancel() }
            for (_, pending) in writes { pending.cancel() }
        }
        for change in batch {
            let name = ApptimistFileName.name(ofKey: change.key)
            if ApptimistBuckets.reservedFiles.contains(name) {
                try refuse(change, code: 403, "\(name) is an access-control file the service keeps: it is read here, never written")
                continue
            }
            guard let filename = ApptimistFileName.wireName(name) else {
                try refuse(change, code: 400, "\(name) is no Apptimist file name (1 to 255 bytes, no `/`)")
                continue
            }
            let fields = ApptimistFileFields(publicKey: configuration.identity.box.publicKey, filename: filename)
            guard let value = try mirror.value(sentBy: change) else {
                steps.append((change, .remove(await post(.remove(fields), answer: AnswerKey(type: .remove, subject: filename)))))
                continue
            }
            let bytes = Self.fileFormat.bytes(of: value) ?? []
            guard bytes.count <= configuration.maxWriteBytes else {
                let mebibytes = { (count: Int) in String(format: "%.1f MiB", Double(count) / 1_048_576) }
                try refuse(
                    change, code: 413,
                    "too large to send: \(mebibytes(bytes.count)), over the \(mebibytes(configuration.maxWriteBytes)) one WRITE may "
                        + "carry (413); kept locally")
                continue
            }
            // Taken when the file was opened for writing, and still held: WRITE at once.
            if holdsLock(change.key) {
                steps.append((change, .write(fields, bytes)))
            } else {
                steps.append((change, .lock(await post(.lock(fields), answer: AnswerKey(type: .lock, subject: fields.filename)), fields, bytes)))
            }
        }
        for (change, step) in steps {
            switch step {
            case .remove(let pending):
                let answer = try await pending.answer()
                heldLocks[change.key] = nil
                guard answer.error == 0 || ApptimistFileName.isNotFound(answer.error) else {
                    try refuse(change, code: Int(answer.error), "REMOVE refused: \(answer.reason)")
                    continue
                }
                try acknowledge(change)
            case .lock(let pending, let fields, let bytes):
                let lock = try await pending.answer()
                guard lock.error == 0 || ApptimistFileName.isNotFound(lock.error) else {
                    try refuse(change, code: Int(lock.error), "LOCK refused: \(lock.reason)")
                    continue
                }
                writes.append((change, await postWrite(change, fields, bytes)))
            case .write(let fields, let bytes):
                writes.append((change, await postWrite(change, fields, bytes)))
            }
        }
        for (change, pending) in writes {
            let written = try await pending.answer()
            guard written.error == 0 else {
                try refuse(change, code: Int(written.error), "WRITE refused: \(written.reason)")
                continue
            }
            try acknowledge(change)
        }
    }

    private func postWrite(_ change: OutgoingChange, _ fields: ApptimistFileFields, _ bytes: [UInt8]) async -> PendingAnswer {
        // The WRITE ends the lock (as does a refused one: the next save LOCKs again).
        heldLocks[change.key] = nil
        return await post(.write(fields), answer: AnswerKey(type: .write, subject: fields.filename), data: bytes)
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

    /// Files saved in the outbox: one MESSAGE per recipient each names, each sealed for that
    /// recipient, all sent without waiting for echoes. A file stays (state sent) until the
    /// service echoes it; it then moves into messages (`outboxEchoed`). False when the
    /// connection is gone.
    private func sendOutbox(_ owed: [OutgoingChange]) async throws -> Bool {
        var due: [(change: OutgoingChange, data: [UInt8], recipients: [[UInt8]])] = []
        // Sent on this connection: its echo is on the way. Sent on an earlier one and not echoed
        // (replayed after head) by now: sent again (a message goes at least once).
        for change in owed where !sentOnThisConnection.contains(change.ccid) {
            guard let value = try mirror.value(sentBy: change) else {
                // Removed before it went (or after its echo): nothing to tell the service.
                try acknowledge(change)
                continue
            }
            let data = Self.fileFormat.bytes(of: value) ?? []
            switch OutboxRecipients.parse(data) {
            case .success(let keys): due.append((change, data, keys))
            case .failure(let problem): try refuse(change, code: 400, problem.description)
            }
        }
        guard !due.isEmpty else { return true }
        guard let version = connection?.channel.version, refreshed else { return false }
        let me = configuration.identity.box.publicKey
        let time = UInt64(max(0, Date().timeIntervalSince1970))
        // Marked before they go, all in one write: an echo may be handled while a later PDU is
        // being written. Only what the store still owes goes (a file removed meanwhile does not).
        let owedNow = try store.markSent(ccids: due.map(\.change.ccid))
        for (change, data, recipients) in due where owedNow.contains(change.ccid) {
            for recipient in recipients {
                let pdu = ApptimistPDU.message(time: time, recipient: recipient, to: recipient, from: me)
                let header = try ApptimistHeader(version: version, pdu: pdu).render()
                try await write(pdu, data: data, for: recipient) { sealed in
                    let id = try self.messageID(headerBytes: header, data: sealed)
                    self.outboxSent[id] = change.key
                }
            }
            sentOnThisConnection.insert(change.ccid)
        }
        return true
    }

    /// One of this user's messages came back from the service: the outbox file holding those
    /// bytes has gone out, and leaves the outbox (the message shows in messages/). A MESSAGE
    /// sent on this connection is known by its id; another (sent before a reconnect or a
    /// restart, or by another device) by its bytes.
    func outboxEchoed(id: String, _ data: [UInt8]) throws {
        let bucket = ApptimistBuckets.outbox
        let candidates = try outboxSent.removeValue(forKey: id).map { [$0] } ?? entityKeys(bucket)
        for key in candidates {
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

    func refuse(_ change: OutgoingChange, code: Int, _ reason: String) throws {
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
