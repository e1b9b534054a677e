import ApptimistCrypto
import ApptimistProtocol
import Foundation
import JSONDiff
import Logging
import SyncEngine
import SyncStore

extension ApptimistClient {
    /// Connect (a fresh ephemeral key each time), log in, read the files, send what is owed,
    /// serve the socket until it ends; wait (exponential backoff with jitter), repeat. A
    /// connection whose sequence would wrap is closed and opened again at once, never reused.
    func connectionLoop() async {
        var backoff = Backoff(initial: configuration.initialBackoff, maximum: configuration.maximumBackoff)
        var generator = SystemRandomNumberGenerator()
        var attempt = 0
        var offlineSince = Date()
        while running && !Task.isCancelled {
            attempt += 1
            stateBroadcaster.publish(.connecting(attempt: attempt))
            var reason = "connection closed"
            var reopenAtOnce = false
            let started = ContinuousClock.now
            do {
                try await connectOnce()
            } catch ApptimistChannelError.protocol(.sequenceExhausted) {
                reason = "the connection's sequence is used up; reopening with a fresh key"
                reopenAtOnce = true
            } catch {
                reason = String(describing: error)
            }
            if sequenceRanOut {
                sequenceRanOut = false
                reason = "the connection's sequence is used up; reopening with a fresh key"
                reopenAtOnce = true
            }
            logger.debug("apptimist connection ended: \(reason)")
            let wasReady = connectionEnded(reason)
            if wasReady {
                if ContinuousClock.now - started >= configuration.stableConnection { backoff.reset() }
                attempt = 0
                offlineSince = Date()
            }
            guard running && !Task.isCancelled else { break }
            if reopenAtOnce { continue }
            let delay = backoff.nextDelay(using: &generator)
            let seconds = Double(delay.components.seconds) + Double(delay.components.attoseconds) / 1e18
            stateBroadcaster.publish(.offline(since: offlineSince, retryAt: Date().addingTimeInterval(seconds), reason: reason))
            await sleepUnlessWoken(delay)
        }
    }

    private func connectOnce() async throws {
        let ephemeral = try BoxKeyPair.generate()
        try await ApptimistSocket.connect(
            address, query: ApptimistHex.encode(ephemeral.publicKey), subprotocols: configuration.offeredSubprotocols,
            maxMessageBytes: configuration.maxMessageBytes, timeout: configuration.connectTimeout
        ) { accepted, messages, writer in
            let version = try await self.negotiated(accepted)
            try await self.serve(version: version, ephemeral: ephemeral, messages: messages, writer: writer)
        }
    }

    /// The version the server's answer names, refused when below what this mount has seen or
    /// below the highest version its pinned service key lists.
    func negotiated(_ accepted: String?) throws -> ApptimistVersion {
        guard let version = ApptimistVersion.clientReading(accepted: accepted) else {
            throw ApptimistEngineError.connection("the server chose a subprotocol that was not offered: \(accepted ?? "")")
        }
        let kept: String? = (try? store.engineSetting(Self.versionSetting)) ?? nil
        let seen: ApptimistVersion? = kept.flatMap { UInt8($0) }.flatMap { ApptimistVersion(rawValue: $0) }
        let minimum = max(configuration.minimumVersion, seen ?? .v1, configuration.service.versions.first ?? .v1)
        guard version >= minimum else {
            throw ApptimistEngineError.downgrade(
                offered: configuration.offeredSubprotocols.joined(separator: ", "), accepted: version, minimum: minimum)
        }
        if version > (seen ?? .v1) { try store.setEngineSetting(Self.versionSetting, to: String(version.rawValue)) }
        return version
    }

    private func serve(
        version: ApptimistVersion, ephemeral: BoxKeyPair, messages: AsyncThrowingStream<[UInt8], Error>, writer: ApptimistSocketWriter
    ) async throws {
        let channel = try ApptimistChannel(
            version: version, own: ephemeral, peerPublicKey: configuration.service.publicKey,
            serviceDataNonce: configuration.service.dataNonce, sequenceLimit: configuration.sequenceLimit)
        connection = Connection(channel: channel, writer: writer)
        let identity = configuration.identity
        try await write(.login(
            userPublicKey: identity.box.publicKey, signature: try identity.signedBoxKey(),
            max: configuration.maxHistory, head: lastMessageID()))
        logger.debug("apptimist: LOGIN sent (protocol version \(version.rawValue))")
        defer { afterLoginTask?.cancel() }
        for try await message in messages {
            try receive(message)
        }
    }

    /// The service echoed LOGIN: the account took the key. The queued messages follow by
    /// themselves; the files are read, then what is owed is sent.
    private func loggedIn() {
        guard !loggedInNow else { return }
        loggedInNow = true
        stateBroadcaster.publish(.connected)
        logger.info("apptimist: logged in to \(configuration.serverURL) (protocol version \(connection?.channel.version.rawValue ?? 0))")
        afterLoginTask = Task { await self.afterLogin() }
    }

    /// LOGIN's `head`: the last message this mount stored (zeros: every message queued).
    func lastMessageID() -> [UInt8] {
        let kept: String? = (try? store.engineSetting(Self.headSetting)) ?? nil
        guard let kept, let id = ApptimistHex.decode(kept), id.count == 64 else { return [UInt8](repeating: 0, count: 64) }
        return id
    }

    /// Once logged in: read every file the mount knows and the access-control files, then send
    /// what is owed.
    func afterLogin() async {
        do {
            try await refreshFiles()
            refreshed = true
            for bucket in ApptimistBuckets.all {
                let count = (try? store.localIndex(bucket: bucket).index.count) ?? 0
                progressBroadcaster.publish(SyncProgress(bucket: bucket, entitiesDone: count, entitiesKnown: count, bytesReceived: 0, isReady: true))
            }
            await flush()
        } catch {
            logger.warning("apptimist: reading the files failed: \(error)")
            await connection?.writer.close()
        }
    }

    /// Seals and writes one PDU; a used-up sequence closes the connection (it is opened again).
    /// `sealed` is handed the sealed data part before the frame goes (a message's id hashes it).
    func write(
        _ pdu: ApptimistPDU, data: [UInt8]? = nil, for recipient: [UInt8]? = nil, sealed: (ApptimistSealedData) throws -> Void = { _ in }
    ) async throws {
        guard var current = connection else { throw ApptimistEngineError.connection("not connected") }
        let frame: [UInt8]
        var sealedData = ApptimistSealedData.none
        do {
            if let data {
                let reader: [UInt8] = recipient ?? configuration.service.publicKey
                sealedData = try current.channel.sealData(data, to: reader, from: configuration.identity.box.secretKey)
            }
            frame = try current.channel.seal(pdu, data: sealedData)
        } catch {
            if case ApptimistChannelError.protocol(.sequenceExhausted) = error {
                sequenceRanOut = true
                await current.writer.close()
            }
            throw error
        }
        connection?.channel = current.channel
        try sealed(sealedData)
        try await current.writer.write(frame)
    }

    /// One binary message from the service. A PDU that does not open (forged, replayed, cut)
    /// ends the connection: its sequence can no longer be trusted.
    func receive(_ bytes: [UInt8]) throws {
        guard var current = connection else { return }
        let received = try current.channel.open(bytes)
        connection?.channel = current.channel
        switch received.pdu {
        case .message(let time, _, let to, let from):
            try receiveMessage(received, time: time, to: to, from: from)
        case .truncate(let id):
            try mirror.remove(key: ApptimistHex.encode(id), bucket: ApptimistBuckets.messages)
            answer(AnswerKey(type: .truncate, subject: id), ApptimistAnswer(error: 0, data: []))
        case .read(let fields), .lock(let fields), .write(let fields), .remove(let fields):
            let data = received.data.isEmpty ? [] : try openFromService(received)
            answer(AnswerKey(type: received.pdu.type, subject: fields.filename), ApptimistAnswer(error: fields.error, data: data))
        case .redirect(let uri):
            logger.notice("apptimist: the service redirects to \(String(decoding: uri, as: UTF8.self)); reconnecting")
            Task { await self.connection?.writer.close() }
        case .login:
            loggedIn()
        case .new, .del, .pause, .resume, .vouch, .vouchers, .searchByName, .searchByUID, .searchByKey, .user:
            logger.debug("apptimist: \(received.pdu.type) from the service, not used by the mount")
        }
    }

    private func openFromService(_ received: ApptimistReceived) throws -> [UInt8] {
        guard let connection else { throw ApptimistEngineError.connection("not connected") }
        return try connection.channel.openData(
            received.data, from: configuration.service.publicKey, to: configuration.identity.box.secretKey)
    }

    /// A message for this user (or one it sent, echoed): stored under its id, the head moved on.
    private func receiveMessage(_ received: ApptimistReceived, time: UInt64, to: [UInt8], from: [UInt8]) throws {
        guard let connection else { return }
        let me = configuration.identity.box.publicKey
        // A box opens with the other party's public key on either side (crypto_box's key is shared).
        let other = from == me ? to : from
        let id = try messageID(headerBytes: received.headerBytes, data: received.data)
        if from == configuration.service.publicKey {
            try receiveNotice(received, id: id)
            return
        }
        let data: [UInt8]
        do {
            data = try connection.channel.openData(received.data, from: other, to: configuration.identity.box.secretKey)
        } catch {
            // Not sealed for this user by its sender (forged, or for another key): nothing to
            // show. The head moves past it, or every reconnect would replay it and end again.
            logger.warning("apptimist: message \(id.prefix(16))... does not open (\(error)); skipped")
            try store.setEngineSetting(Self.headSetting, to: id)
            return
        }
        try showMessage(data, from: from, to: to, time: time, id: id)
        try store.setEngineSetting(Self.headSetting, to: id)
        if from == me { try outboxEchoed(id: id, data) }
    }

    /// A message's opened data in messages/, under its id, with who sent it to whom and when.
    private func showMessage(_ data: [UInt8], from: [UInt8], to: [UInt8], time: UInt64, id: String) throws {
        var value = Self.messageFormat.value(of: data)
        value["from"] = .string(ApptimistHex.encode(from))
        value["to"] = .string(ApptimistHex.encode(to))
        value["time"] = .integer(Int64(clamping: time))
        try mirror.apply(state: value, key: id, bucket: ApptimistBuckets.messages)
    }

    /// The seed's message id (hex): sha512 of the header as sent (version byte first) and the
    /// data part as in the frame.
    func messageID(headerBytes: [UInt8], data: ApptimistSealedData) throws -> String {
        ApptimistHex.encode(try SHA512.digest(headerBytes + data.wireBytes))
    }

    /// A file notice from the service (Docs/apptimist-protocol.md, "File notices"): a file of
    /// this user changed, here or elsewhere. Never shown in messages/; the head moves past it.
    /// A write whose bytes the store has already (this mount's own save echoed) changes nothing;
    /// another is READ by the flush (never here: its answer comes on this same loop). A removal
    /// removes the file unless a save of it is owed here (that save re-creates it).
    private func receiveNotice(_ received: ApptimistReceived, id: String) throws {
        defer { try? store.setEngineSetting(Self.headSetting, to: id) }
        guard let connection,
            let data = try? connection.channel.openData(received.data, from: configuration.service.publicKey, to: configuration.identity.box.secretKey)
        else {
            logger.warning("apptimist: a notice from the service (\(id.prefix(16))...) does not open; skipped")
            return
        }
        if let bounce = ApptimistUndelivered(json: data) {
            guard case .message(let time, _, _, _) = received.pdu else { return }
            try receiveBounce(bounce, data: data, time: time, id: id)
            return
        }
        guard let notice = ApptimistFileNotice(json: data), let name = String(bytes: notice.file, encoding: .utf8),
            ApptimistFileName.wireName(name) == notice.file
        else {
            logger.warning("apptimist: a notice from the service (\(id.prefix(16))...) does not open or name a file; skipped")
            return
        }
        let bucket = ApptimistBuckets.files
        let key = ApptimistFileName.key(of: name)
        switch notice.operation {
        case .write:
            let entity = try store.entity(bucket: bucket, key: key)
            let known = [entity?.version == nil ? nil : entity?.ghost, entity?.value].compactMap { $0 }
            if let sha512 = notice.sha512,
                try known.contains(where: { value in try SHA512.digest(Self.fileFormat.bytes(of: value) ?? []) == sha512 })
            {
                logger.debug("apptimist: notice of \(name): bytes known here")
                return
            }
            noteFileToRead(key)
        case .remove:
            if try store.outgoingChanges(bucket: bucket).contains(where: { $0.key == key }) {
                logger.info("apptimist: \(name) removed elsewhere while a save of it is owed here: the save re-creates it")
                return
            }
            try mirror.remove(key: key, bucket: bucket)
        }
    }

    /// A message of this user's the service could not deliver (Docs/apptimist-protocol.md,
    /// "Across versions"): the bounce shows in messages/ as a message from the service, and the
    /// outbox file the message came from, when this connection sent it, stays in the outbox
    /// refused (`rejected:422`, the reason in status and the xattr) instead of waiting for an
    /// echo that never comes. One sent before a reconnect goes again, and its bounce then finds it.
    private func receiveBounce(_ bounce: ApptimistUndelivered, data: [UInt8], time: UInt64, id: String) throws {
        try showMessage(data, from: configuration.service.publicKey, to: configuration.identity.box.publicKey, time: time, id: id)
        let recipient = ApptimistHex.encode(bounce.recipient)
        logger.warning("apptimist: a message to \(recipient.prefix(16))... was not delivered: \(bounce.reason)")
        guard let key = outboxSent.removeValue(forKey: ApptimistHex.encode(bounce.messageID)) else { return }
        for change in try store.outgoingChanges(bucket: ApptimistBuckets.outbox) where change.key == key {
            try refuse(change, code: 422, "not delivered to \(recipient): \(bounce.reason)")
        }
    }

    func answer(_ key: AnswerKey, _ answer: ApptimistAnswer) {
        guard var queue = waiters[key], !queue.isEmpty else { return }
        let first = queue.removeFirst()
        waiters[key] = queue.isEmpty ? nil : queue
        first.yield(answer)
        first.finish()
    }

    /// Sends a request and waits for its answer.
    func request(_ pdu: ApptimistPDU, answer key: AnswerKey, data: [UInt8]? = nil) async throws -> ApptimistAnswer {
        try await post(pdu, answer: key, data: data).answer()
    }

    /// Sends a request without waiting for its answer, so that several can be in flight: the
    /// service answers requests in order, and each answer finds its waiter by type and file name.
    /// The waiter is in place before the request goes: its answer may come at once. Its answer is
    /// awaited (`answer()`) or given up (`cancel()`): the timer closes the connection otherwise.
    func post(_ pdu: ApptimistPDU, answer key: AnswerKey, data: [UInt8]? = nil) async -> PendingAnswer {
        let (answers, waiter) = AsyncThrowingStream<ApptimistAnswer, Error>.makeStream()
        // A cancelled task (a login's work, its connection gone) cannot wait for an answer:
        // a request it sent on the next connection would be answered to nobody. Nothing goes,
        // and no waiter is queued to take the answer of the next request with its key.
        guard !Task.isCancelled else {
            waiter.finish(throwing: ApptimistEngineError.connection("the connection the request was for has ended"))
            return PendingAnswer(type: pdu.type, answers: answers, timer: Task {})
        }
        waiters[key, default: []].append(waiter)
        let timeout = configuration.answerTimeout
        let timer = Task {
            try await Task.sleep(for: timeout)
            waiter.finish(throwing: ApptimistEngineError.connection("no answer to \(pdu.type) within \(timeout)"))
            await self.connection?.writer.close()
        }
        do {
            try await write(pdu, data: data)
        } catch {
            waiter.finish(throwing: error)
        }
        return PendingAnswer(type: pdu.type, answers: answers, timer: timer)
    }

    /// Returns whether the connection had logged in; fails every request waiting for an answer.
    func connectionEnded(_ reason: String) -> Bool {
        let wasConnected = loggedInNow
        connection = nil
        loggedInNow = false
        refreshed = false
        sentOnThisConnection = []
        outboxSent = [:]
        // The service drops a connection's locks with it.
        heldLocks = [:]
        locksWanted = []
        afterLoginTask?.cancel()
        afterLoginTask = nil
        let pending = waiters.values.flatMap { $0 }
        waiters = [:]
        for waiter in pending { waiter.finish(throwing: ApptimistEngineError.connection(reason)) }
        return wasConnected
    }
}
