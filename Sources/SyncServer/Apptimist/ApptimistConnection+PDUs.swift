import ApptimistCrypto
import ApptimistProtocol
import Foundation
import NIOWebSocket

/// The service's answer to each PDU type (Docs/apptimist-protocol.md, "The bucketfs service").
extension ApptimistConnection {
    /// The error codes of READ, LOCK, WRITE and REMOVE answers: Linux errno values, so a
    /// mount can hand them on as they are. The data carries a description.
    enum FileError: UInt16 {
        case notFound = 2       // ENOENT
        case denied = 13        // EACCES
        case busy = 16          // EBUSY
        case invalid = 22       // EINVAL
    }

    /// The seed's reserved, access-control file names.
    static let reservedNames: Set<[UInt8]> = Set(["author", "editors", "moderators", "subscribers"].map { Array($0.utf8) })

    func handle(_ received: ApptimistReceived) async throws -> Verdict {
        guard let user else { return try await handleBeforeLogin(received.pdu) }
        switch received.pdu {
        case .login:
            return .close(.policyViolation, "already logged in")
        case .new(let publicKey, let authKey, let name, _, _):
            try await createEvent(publicKey: publicKey, authKey: authKey, name: name, author: user)
        case .del(let publicKey):
            if let event = try await service.storage.account(publicKey: publicKey), event.author == user.publicKey {
                try await service.storage.deleteAccount(publicKey: publicKey)
                send(.del(publicKey: publicKey))
            }
        case .message(let time, let recipient, let to, let from):
            try await queueMessage(received, time: time, recipient: recipient, to: to, from: from, user: user)
        case .truncate(let id):
            let removed = try await service.storage.truncate(owner: user.publicKey, id: id)
            service.truncated(owner: user.publicKey, id: id, message: removed)
        case .pause:
            state.withLockedValue { $0.paused = true }
        case .resume:
            state.withLockedValue { $0.paused = false }
            wake()
        case .vouch(let subject, let signature):
            try await vouch(subject: subject, signature: signature, user: user)
        case .vouchers(let subject, _):
            send(.vouchers(subject: subject, vouchers: try await service.storage.vouchers(subject: subject)))
        case .searchByName(let maxUsers, let name):
            answerSearch(try await service.storage.accounts(matching: .namePrefix(name), limit: maxUsers == 0 ? nil : Int(maxUsers)))
        case .searchByUID(let maxUsers, let uid):
            answerSearch(try await service.storage.accounts(matching: .uid(uid), limit: maxUsers == 0 ? nil : Int(maxUsers)))
        case .searchByKey(let publicKey):
            answerSearch(try await service.storage.accounts(matching: .publicKey(publicKey), limit: 1))
        case .read(let fields):
            try await read(fields, user: user, locking: false)
        case .lock(let fields):
            try await read(fields, user: user, locking: true)
        case .write(let fields):
            try await write(fields, data: received.data, user: user)
        case .remove(let fields):
            try await remove(fields, user: user)
        case .redirect, .user:
            // Service-to-device PDUs: parsed, nothing to do when a device sends one.
            break
        }
        return .keepOpen
    }

    /// Before LOGIN only NEW (with an invitation) and LOGIN mean anything; the seed's service
    /// ignores the rest, and so does this one.
    private func handleBeforeLogin(_ pdu: ApptimistPDU) async throws -> Verdict {
        switch pdu {
        case .new(let publicKey, let authKey, let name, let uid, let token):
            let account = ApptimistAccount(publicKey: publicKey, authKey: authKey, name: name, uid: uid, author: nil)
            do {
                try await service.storage.createAccount(account, invitation: String(decoding: token, as: UTF8.self))
            } catch let error as ApptimistStoreError {
                return .close(.policyViolation, "NEW refused: \(error)")
            }
            send(.new(publicKey: publicKey, authKey: authKey, name: name, uid: uid, token: []))
            return .keepOpen
        case .login(let userPublicKey, let signature, let max, let head):
            guard let account = try await service.storage.account(publicKey: userPublicKey),
                (try? Ed25519.verify(signature, of: userPublicKey, publicKey: account.authKey)) != nil
            else { return .close(.policyViolation, "LOGIN refused: unknown key or bad signature") }
            if version == .v2 {
                // Files with no notice queued (older than notices, or their notice truncated) get
                // one now, so the replay lists every file (Docs/apptimist-protocol.md).
                let identity = self.identity
                try await service.storage.queueMissingNotices(owner: userPublicKey) { name, contents in
                    try ApptimistService.fileNotice(identity: identity, owner: userPublicKey, name: name, contents: contents)
                }
            }
            try await service.storage.recordLogin(publicKey: userPublicKey, version: version)
            answerInTheLayoutOf(account)
            let start = try await service.storage.replayStart(owner: userPublicKey, head: head, max: max)
            state.withLockedValue {
                $0.user = account
                $0.cursor = start
            }
            service.loggedIn(self, user: userPublicKey)
            // The echo tells the device it is in; the replay follows it.
            send(.login(userPublicKey: userPublicKey, signature: signature, max: max, head: head))
            wake()
            return .keepOpen
        default:
            logger.debug("ignoring a \(pdu.type) PDU before LOGIN")
            return .keepOpen
        }
    }

    private func createEvent(publicKey: [UInt8], authKey: [UInt8], name: [UInt8], author: ApptimistAccount) async throws {
        let event = ApptimistAccount(publicKey: publicKey, authKey: authKey, name: name, uid: [], author: author.publicKey)
        do {
            try await service.storage.createAccount(event, invitation: nil)
            let name = Array("author".utf8)
            try await service.storage.writeFile(
                owner: publicKey, name: name, contents: author.publicKey,
                notice: try await service.fileNotice(owner: publicKey, name: name, contents: author.publicKey))
            send(.new(publicKey: publicKey, authKey: authKey, name: name, uid: [], token: []))
        } catch ApptimistStoreError.accountExists {
            logger.info("NEW of an event whose key is taken: ignored")
        }
    }

    /// A user's message is queued for its recipient and echoed to the sender. One whose `to` and
    /// `recipient` are an event or forum is copied instead to the forum's members it reaches
    /// (`ApptimistForum`), each copy's `recipient` that member and its data as sent (sealed to
    /// the forum's key: the service holds no secret key to seal it again; Docs/apptimist-protocol.md).
    private func queueMessage(
        _ received: ApptimistReceived, time: UInt64, recipient: [UInt8], to: [UInt8], from: [UInt8], user: ApptimistAccount
    ) async throws {
        guard from == user.publicKey else {
            logger.info("ignoring a MESSAGE whose sender is not the logged-in user")
            return
        }
        // The seed's header line has no `time`: the service stamps the time it received it.
        let time = received.layout == .headerLines ? UInt64(max(0, Date().timeIntervalSince1970)) : time
        // The message as sent: what the sender's devices see (the echo), under the seed's id.
        let sent = try ApptimistQueuedMessage(version: version, pdu: .message(time: time, recipient: recipient, to: to, from: from), data: received.data)
            .withRenditionIDs(dataNonce: dataNonce)
        var copies: [(owner: [UInt8], message: ApptimistQueuedMessage)] = []
        // Each account read once: the recipient's is `to`'s for a message to a user.
        let toAccount = try await service.storage.account(publicKey: to)
        let recipientAccount = recipient == to ? toAccount : try await service.storage.account(publicKey: recipient)
        var event = try await forum(of: toAccount)
        if event == nil, recipient != to { event = try await forum(of: recipientAccount) }
        if let forum = event {
            guard recipient == to else {
                logger.info("ignoring a MESSAGE to a forum whose recipient is not the forum")
                return
            }
            guard forum.isMember(from) else {
                logger.info("ignoring a MESSAGE to a forum from someone who is not a member")
                return
            }
            for member in forum.recipients(ofMessageFrom: from) {
                let copy = ApptimistPDU.message(time: time, recipient: member, to: to, from: from)
                copies.append((
                    owner: member,
                    message: try ApptimistQueuedMessage(version: version, pdu: copy, data: received.data).withRenditionIDs(dataNonce: dataNonce)))
            }
        } else if recipient != from {
            if sent.crossID == nil, recipientAccount?.loginVersions == [.v1] {
                // Sealed with a random nonce, it cannot reach the recipient's devices, all of
                // version 1 (the seed's fixed nonce only): the sender hears why, and it is not echoed.
                try await bounce(sent, recipient: recipient, sender: from)
                return
            }
            copies.append((owner: recipient, message: sent))
        }
        copies.append((owner: from, message: sent))
        try await service.storage.queueMessages(copies)
        for copy in copies { service.messagesQueued(for: copy.owner) }
    }

    /// Tells the sender that `message` was not delivered to `recipient`: a MESSAGE from the
    /// service to the sender (`ApptimistUndelivered`, Docs/apptimist-protocol.md), queued like a
    /// file notice. Version 2 like every notice: the sender is on version 2 (only its messages bounce).
    private func bounce(_ message: ApptimistQueuedMessage, recipient: [UInt8], sender: [UInt8]) async throws {
        let undelivered = ApptimistUndelivered(
            messageID: message.id, recipient: recipient,
            reason: "the recipient's devices all speak Apptimist version 1, which cannot open a version 2 message's data")
        let notice = try ApptimistService.serviceMessage(identity: identity, owner: sender, json: undelivered.json())
        logger.info("an Apptimist message to a version 1 recipient was not delivered; its sender is told")
        try await service.storage.queueMessages([(owner: sender, message: notice)])
        service.messagesQueued(for: sender)
    }

    /// The event or forum `key` is, or nil (a user, or no account).
    private func forum(_ key: [UInt8]) async throws -> ApptimistForum? {
        try await forum(of: try await service.storage.account(publicKey: key))
    }

    /// The event or forum `account` is, or nil.
    private func forum(of account: ApptimistAccount?) async throws -> ApptimistForum? {
        guard let account else { return nil }
        return try await ApptimistForum(account, storage: service.storage)
    }

    private func vouch(subject: [UInt8], signature: [UInt8], user: ApptimistAccount) async throws {
        if signature.allSatisfy({ $0 == 0 }) {
            try await service.storage.setVouch(subject: subject, voucher: user.publicKey, signature: nil)
        } else {
            guard (try? Ed25519.verify(signature, of: subject, publicKey: user.authKey)) != nil else {
                logger.info("ignoring a VOUCH whose signature does not verify")
                return
            }
            try await service.storage.setVouch(subject: subject, voucher: user.publicKey, signature: signature)
        }
        send(.vouch(subject: subject, signature: signature))
    }

    /// The seed's USER answer: one PDU per match, `count` saying how many follow (the last 0);
    /// no match is one USER with a zero key and empty name and uid.
    private func answerSearch(_ accounts: [ApptimistAccount]) {
        guard !accounts.isEmpty else {
            send(.user(count: 0, publicKey: [UInt8](repeating: 0, count: CryptoBox.keyLength), name: [], uid: []))
            return
        }
        for (index, account) in accounts.enumerated() {
            let following = UInt16(clamping: accounts.count - 1 - index)
            send(.user(count: following, publicKey: account.publicKey, name: account.name, uid: account.uid))
        }
    }

    // MARK: Files

    private struct Access {
        var read: Bool
        var write: Bool
        /// May write the access-control files (an event's author, for editors, moderators, subscribers).
        var control: Bool
    }

    private func access(to owner: [UInt8], user: ApptimistAccount) async throws -> Access {
        if owner == user.publicKey { return Access(read: true, write: true, control: false) }
        guard let forum = try await forum(owner) else { return Access(read: false, write: false, control: false) }
        if forum.author == user.publicKey { return Access(read: true, write: true, control: true) }
        if forum.editors.contains(user.publicKey) { return Access(read: true, write: true, control: false) }
        return Access(read: forum.isMember(user.publicKey), write: false, control: false)
    }

    /// A Linux file name, not a path: 1-255 bytes, no '/' or NUL, not '.' or '..'.
    static func isValidFilename(_ name: [UInt8]) -> Bool {
        !name.isEmpty && name.count <= 255 && !name.contains(0x2F) && !name.contains(0) && name != [0x2E] && name != [0x2E, 0x2E]
    }

    private func refuse(_ pdu: (ApptimistFileFields) -> ApptimistPDU, _ fields: ApptimistFileFields, _ error: FileError, _ why: String) {
        var answer = fields
        answer.error = error.rawValue
        send(pdu(answer), data: sealForUser(Array(why.utf8)))
    }

    /// `refuse` for a WRITE or REMOVE, counted as a refused change.
    private func refuseChange(_ pdu: (ApptimistFileFields) -> ApptimistPDU, _ fields: ApptimistFileFields, _ error: FileError, _ why: String) {
        service.configuration.statistics.changeRefused(via: .apptimist, code: Int(error.rawValue))
        refuse(pdu, fields, error, why)
    }

    /// Ends this connection's lock on the file (its WRITE or REMOVE).
    private func releaseLock(_ fields: ApptimistFileFields) async throws {
        try await service.storage.releaseLock(owner: fields.publicKey, name: fields.filename, holder: lockHolder)
    }

    private func read(_ fields: ApptimistFileFields, user: ApptimistAccount, locking: Bool) async throws {
        let pdu: (ApptimistFileFields) -> ApptimistPDU = locking ? { .lock($0) } : { .read($0) }
        guard Self.isValidFilename(fields.filename) else { return refuse(pdu, fields, .invalid, "not a valid file name") }
        let access = try await access(to: fields.publicKey, user: user)
        guard access.read else { return refuse(pdu, fields, .denied, "no access to that user's files") }
        let contents = try await service.storage.file(owner: fields.publicKey, name: fields.filename)
        if locking {
            guard access.write || (access.control && Self.reservedNames.contains(fields.filename)) else {
                return refuse(pdu, fields, .denied, "the file is read-only")
            }
            guard try await service.storage.takeLock(
                owner: fields.publicKey, name: fields.filename, holder: lockHolder, lifetime: service.settings.lockLifetime)
            else {
                return refuse(pdu, fields, .busy, "another connection holds the file's lock")
            }
        } else if contents == nil {
            return refuse(pdu, fields, .notFound, "no such file")
        }
        // A LOCK of a file that does not exist takes the lock and answers it empty (to be created).
        var answer = fields
        answer.error = 0
        send(pdu(answer), data: sealForUser(contents ?? []))
    }

    private func mayChange(_ fields: ApptimistFileFields, user: ApptimistAccount) async throws -> (FileError, String)? {
        guard Self.isValidFilename(fields.filename) else { return (.invalid, "not a valid file name") }
        let access = try await access(to: fields.publicKey, user: user)
        if Self.reservedNames.contains(fields.filename) {
            guard access.control, fields.filename != Array("author".utf8) else { return (.denied, "an access-control file of the service: read-only") }
        } else if !access.write {
            return (.denied, "no write access to that user's files")
        }
        if try await service.storage.isLocked(owner: fields.publicKey, name: fields.filename, byOtherThan: lockHolder) {
            return (.busy, "another connection holds the file's lock")
        }
        return nil
    }

    private func write(_ fields: ApptimistFileFields, data: ApptimistSealedData, user: ApptimistAccount) async throws {
        if let (error, why) = try await mayChange(fields, user: user) { return refuseChange({ .write($0) }, fields, error, why) }
        guard !data.isEmpty, let contents = openFromUser(data) else {
            return refuseChange({ .write($0) }, fields, .invalid, "the data does not open (sealed for another key or nonce, or corrupted)")
        }
        let notice = try await service.fileNotice(owner: fields.publicKey, name: fields.filename, contents: contents)
        let submitted = ContinuousClock.now
        try await service.storage.writeFile(owner: fields.publicKey, name: fields.filename, contents: contents, notice: notice)
        service.configuration.statistics.changeAccepted(via: .apptimist, latency: ContinuousClock.now - submitted)
        try await releaseLock(fields)
        var answer = fields
        answer.error = 0
        send(.write(answer))
        // After the answer: on this connection the notice follows it.
        service.messagesQueued(for: fields.publicKey)
    }

    private func remove(_ fields: ApptimistFileFields, user: ApptimistAccount) async throws {
        if let (error, why) = try await mayChange(fields, user: user) { return refuseChange({ .remove($0) }, fields, error, why) }
        let notice = try await service.fileNotice(owner: fields.publicKey, name: fields.filename, contents: nil)
        let submitted = ContinuousClock.now
        guard try await service.storage.removeFile(owner: fields.publicKey, name: fields.filename, notice: notice) else {
            return refuseChange({ .remove($0) }, fields, .notFound, "no such file")
        }
        service.configuration.statistics.changeAccepted(via: .apptimist, latency: ContinuousClock.now - submitted)
        try await releaseLock(fields)
        var answer = fields
        answer.error = 0
        send(.remove(answer))
        service.messagesQueued(for: fields.publicKey)
    }
}
