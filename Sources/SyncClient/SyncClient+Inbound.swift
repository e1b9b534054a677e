import Foundation
import JSONDiff
import Logging
import SyncEngine
import SyncProtocol
import SyncStore

/// A server frame as read, and what it says (parsed where it was read, off the client).
struct InboundMessage: Sendable {
    let text: String
    let parsed: Result<ServerMessage, ProtocolError>

    init(_ text: String, maxBytes: Int) {
        self.text = text
        parsed = Result { () throws(ProtocolError) in try ServerMessage.parse(text, maxBytes: maxBytes) }
    }
}

extension SyncClient {
    /// One server frame, in arrival order.
    func receive(_ text: String, connectionID: Int) async {
        await receive(InboundMessage(text, maxBytes: configuration.maxMessageBytes), connectionID: connectionID)
    }

    func receive(_ inbound: InboundMessage, connectionID: Int) async {
        guard var open = connection, open.id == connectionID, open.storeFailure == nil else { return }
        open.heartbeat.received(at: .now)
        connection = open
        let text = inbound.text
        logger.trace("recv \(text)")
        if remoteLogLevel >= 2 { await remoteLog("recv \(text.prefix(200))") }
        let message: ServerMessage
        switch inbound.parsed {
        case .success(let parsed):
            message = parsed
        case .failure(let error):
            logger.warning("ignoring unreadable server message: \(error)")
            await remoteLog("unreadable server message: \(error)")
            return
        }
        switch message {
        case .heartbeat(let count):
            connection?.heartbeat.receivedHeartbeat(count, at: .now)
        case .log(let level):
            remoteLogLevel = level
            if level > 0 { await remoteLog("remote logging level \(level)") }
        case .channel(let channel, let channelMessage):
            guard machines.indices.contains(channel) else {
                logger.warning("message for unknown channel \(channel)")
                return
            }
            guard !removedChannels.contains(channel) else { return }
            switch channelMessage {
            case .index, .entity: machines[channel].received(bytes: text.utf8.count)
            default: break
            }
            await handle(channelMessage, channel: channel)
        }
        await sendHeldBack()
    }

    func handle(_ message: ChannelServerMessage, channel: Int) async {
        let bucket = machines[channel].bucket
        switch message {
        case .authOK:
            connection?.authorizedAny = true
            let actions = machines[channel].authorized(
                cv: changeVersionToResumeFrom(bucket), commandSent: configuration.sendCommandInInit)
            await perform(actions, channel: channel)
            publishProgress(channel: channel)
        case .authError(let code, let text):
            logger.error("authorization of \(bucket) failed: \(code) \(text)")
            await perform(machines[channel].authorizationFailed(code: code, message: text), channel: channel)
        case .index(let page):
            await perform(machines[channel].indexPage(page), channel: channel)
            publishProgress(channel: channel)
        case .entity(let key, let version, let reply):
            // A version asked for by `fetchVersions` is history, not a reload: never applied.
            if versionFetches.received(channel: channel, key: key, version: version, reply: reply) { return }
            machines[channel].entityReceived(key: key, version: version)
            let (data, madeBy): (JSONObject?, String?) = if case .data(let object, _, let ccid) = reply { (object, ccid) } else { (nil, nil) }
            do {
                let outcome = try store.applyEntity(bucket: bucket, key: key, version: version, data: data, madeBy: madeBy)
                await follow(outcome, channel: channel)
            } catch {
                await serverDataNotStored("storing \(bucket)/\(key).\(version)", bucket: bucket, error)
            }
            publishProgress(channel: channel)
        case .changeVersionUnknown:
            await perform(machines[channel].changeVersionUnknown(), channel: channel)
        case .changes(let changes):
            await perform(machines[channel].changes(changes), channel: channel)
        case .indexRequest:
            do {
                let snapshot = try store.localIndex(bucket: bucket)
                await write(ChannelClientMessage.indexReply(Conversions.localIndex(snapshot)).frameText(channel: channel))
            } catch {
                logger.error("local index of \(bucket) failed: \(error)")
            }
        }
    }

    /// Carries out a machine's actions in order.
    func perform(_ actions: [BucketMachine.Action], channel: Int) async {
        let bucket = machines[channel].bucket
        for action in actions {
            do {
                switch action {
                case .send(let message):
                    await write(message.frameText(channel: channel))
                case .beginIndex:
                    try store.beginIndex(bucket: bucket)
                case .applyIndexPage(let page, let isLast):
                    let outcome = try store.applyIndexPage(
                        bucket: bucket, entries: Conversions.indexEntries(page), current: page.current, isLast: isLast)
                    await follow(outcome, channel: channel)
                    if isLast {
                        untrustedChangeVersions.remove(bucket)
                        await fetch(try store.pendingReloads(bucket: bucket), channel: channel)
                    }
                case .applyChanges(let changes):
                    await apply(changes, channel: channel)
                case .finishCatchUp:
                    await send(try store.finishCatchUp(bucket: bucket))
                    await fetch(try store.pendingReloads(bucket: bucket), channel: channel)
                case .sendOwed:
                    await send(try store.outgoingChanges(bucket: bucket))
                case .sendCatchUp:
                    if let cv = changeVersionToResumeFrom(bucket) {
                        await write(ChannelClientMessage.changeVersion(cv).frameText(channel: channel))
                    } else {
                        await perform(machines[channel].changeVersionUnknown(), channel: channel)
                    }
                case .reportAuthFailure(let failure):
                    authFailureBroadcaster.publish(BucketAuthFailure(bucket: bucket, failure: failure))
                }
            } catch {
                await remoteLog("\(bucket): store error \(error)")
                await serverDataNotStored("\(bucket): \(String(describing: action).prefix(200))", bucket: bucket, error)
                return
            }
        }
    }

    /// The change version to catch up from: the stored one, unless a store failure made it
    /// untrustworthy (nil: load the index).
    func changeVersionToResumeFrom(_ bucket: String) -> String? {
        guard !untrustedChangeVersions.contains(bucket) else { return nil }
        return (try? store.bucket(named: bucket))??.cv
    }

    /// Something the server sent could not be stored (a full disk): nothing more is taken from
    /// this connection, which is closed, and the bucket loads the index again on the next one.
    /// Going on could carry the stored change version past what was never stored; and that
    /// version may be past it already: a change broadcast between the `auth` and the catch-up
    /// reaches the client before the older changes the catch-up brings, and is stored first.
    /// The index, not the change version, then says what the store is missing.
    func serverDataNotStored(_ what: String, bucket: String, _ error: any Error) async {
        untrustedChangeVersions.insert(bucket)
        logger.error("\(what) failed: \(error); reconnecting to fetch it again")
        guard var open = connection, open.storeFailure == nil else { return }
        open.storeFailure = "store error: \(error)"
        connection = open
        await open.writer.close()
    }

    /// A `c` message: applied changes go to the store in runs; each error is handled per code.
    func apply(_ changes: [Change], channel: Int) async {
        var run: [RemoteChange] = []
        for change in changes {
            switch change {
            case .applied(let applied):
                run.append(Conversions.remoteChange(applied))
            case .rejected(let rejection):
                let batch = run
                run = []
                await applyRemote(batch, channel: channel)
                for ccid in rejection.ccids {
                    await handleError(code: rejection.code, ccid: ccid, key: rejection.id, channel: channel)
                }
            }
        }
        await applyRemote(run, channel: channel)
    }

    func applyRemote(_ batch: [RemoteChange], channel: Int) async {
        guard !batch.isEmpty else { return }
        let bucket = machines[channel].bucket
        do {
            let outcome = try store.applyRemote(bucket: bucket, changes: batch, ownClientID: configuration.clientID)
            // The last change covering each ccid, found in one pass: an answer to a burst
            // acknowledges hundreds of changes, and a search of the batch per ccid grew with the
            // square of its size.
            var lastCovering: [String: RemoteChange] = [:]
            if !outcome.acknowledged.isEmpty {
                for change in batch { for ccid in change.ccids { lastCovering[ccid] = change } }
            }
            for ccid in outcome.acknowledged {
                sentOnConnection.remove(ccid)
                badVersionCounts[ccid] = nil
                serverErrorBackoffs[ccid] = nil
                unauthorizedCounts[ccid] = nil
                if let change = lastCovering[ccid] {
                    acknowledgementBroadcaster.publish(
                        ChangeAcknowledgement(bucket: bucket, key: change.key, ccid: ccid, version: change.endVersion))
                }
            }
            await follow(outcome, channel: channel)
        } catch {
            await serverDataNotStored("applying changes to \(bucket)", bucket: bucket, error)
        }
    }

    /// Spec "Handling Change Errors", with the store deciding and recording state + reason.
    func handleError(code: Int, ccid: String, key: String, channel: Int) async {
        let bucket = machines[channel].bucket
        logger.notice("change \(ccid) to \(bucket)/\(key) refused: \(code)")
        await remoteLog("change \(ccid) refused with \(code)")
        sentOnConnection.remove(ccid)
        // The count of this ccid's 405s goes into the store's decision (rebase, or whole object),
        // made in the transaction that reads what the change is now.
        let badVersionRefusals = code == 405 ? (badVersionCounts[ccid] ?? 0) + 1 : 0
        if code == 405 { badVersionCounts[ccid] = badVersionRefusals }
        do {
            switch try store.reject(
                bucket: bucket, ccid: ccid, code: code, wholeObjectAfter405: badVersionRefusals > configuration.badVersionRetries)
            {
            case .none:
                break
            case .resend(let change) where (500...599).contains(code):
                resendLater(change)
            case .resend(let change):
                await send([change])
            case .catchUp:
                await perform(machines[channel].catchUp(), channel: channel)
            case .reauthorize:
                // Refused again after authorizing anew (a token that may read but not write):
                // sending it once more would only loop.
                unauthorizedCounts[ccid, default: 0] += 1
                if unauthorizedCounts[ccid, default: 0] > 1 {
                    unauthorizedCounts[ccid] = nil
                    try store.refuse(
                        ccid: ccid, code: 401,
                        reason: "server refused permission (401) again after re-authorizing; kept locally")
                    return
                }
                await authorize(channel: channel)
            }
        } catch {
            await serverDataNotStored("recording error \(code) for \(ccid)", bucket: bucket, error)
        }
    }

    /// A change the server could not take for now (5xx: its disk, its database) goes again after
    /// a delay that grows with each refusal, as reconnects do, so that a failing server is not
    /// sent it in a loop. What goes is what the store owes by then (later saves included).
    func resendLater(_ change: OutgoingChange) {
        var backoff = serverErrorBackoffs[change.ccid]
            ?? Backoff(initial: configuration.initialBackoff, maximum: configuration.maximumBackoff)
        var generator = SystemRandomNumberGenerator()
        let delay = backoff.nextDelay(using: &generator)
        serverErrorBackoffs[change.ccid] = backoff
        Task { [weak self] in
            try? await Task.sleep(for: delay)
            await self?.resendOwed(ccid: change.ccid, bucket: change.bucket)
        }
    }

    private func resendOwed(ccid: String, bucket: String) async {
        do {
            await send(try store.outgoingChanges(bucket: bucket).filter { $0.ccid == ccid })
        } catch {
            logger.error("reading change \(ccid) to resend failed: \(error)")
        }
    }

    /// What the store decided after applying something remote: fetch, send, nothing.
    func follow(_ outcome: RemoteOutcome, channel: Int) async {
        // Send first: the changes were read in the store transaction just committed, and no
        // suspension may let a save coalesce into them before they are marked sent.
        await send(outcome.readyToSend)
        await fetch(outcome.reloads, channel: channel)
        if !outcome.lostOnServer.isEmpty {
            let bucket = machines[channel].bucket
            let count = outcome.lostOnServer.count
            let keys = outcome.lostOnServer.prefix(5).joined(separator: ", ") + (count > 5 ? ", ..." : "")
            logger.warning(
                "\(bucket): the server lost \(count) \(count == 1 ? "note's changes" : "notes' changes") (restored from a backup?); sent again: \(keys)")
            await remoteLog("\(bucket): server lost \(count) entities; resent")
        }
    }

    func fetch(_ reloads: [ReloadRequest], channel: Int) async {
        await perform(machines[channel].fetch(reloads), channel: channel)
    }

    /// The bucket's channel when changes written now go out: connected, and the bucket in sync.
    func liveChannel(of bucket: String) -> Int? {
        guard connection != nil, let channel = channelsByBucket[bucket], machines[channel].isReady else { return nil }
        return channel
    }

    /// Writes changes on their bucket's channel if it is in sync; otherwise they wait in the
    /// store and go out with the rest when it is. A change goes out once per connection unless
    /// it was requeued (error handling), however many times it is handed over: the mount's batch
    /// and the owed changes read at catch-up can carry the same one, the first still marked
    /// `queued` after the second was sent.
    ///
    /// What goes out is what the store holds when the changes are marked sent (`markSent`),
    /// never the copies handed over: a save's change waits a few milliseconds in the mount's
    /// batch, and meanwhile the file may have been removed (its create must then not reach the
    /// server, or the file comes back on every device) or saved again. Changes are marked
    /// `sent` before the write: the write suspends, and a save coalescing into a still-`queued`
    /// row meanwhile would change a change the server may already have (same ccid, different
    /// content).
    ///
    /// The changes for one channel go out as one `c:` frame (an array when there are several):
    /// under a burst of saves the server takes them in one message and one commit. A burst too
    /// big for one frame goes in several; a change too big for any is kept back (`rejected:413`).
    ///
    /// At most `maxChangesInFlight` changes are out unanswered: queued ones past that stay in
    /// the store and go when answers make room (`sendHeldBack`). One already recorded as sent
    /// (a resend after a reconnect) always goes: it may not change any more, so it cannot wait
    /// in the store as a queued one does, and only the window ever made it sent.
    public func send(_ changes: [OutgoingChange]) async {
        // One per ccid, in the order first handed; a later copy of a change replaces the earlier.
        var picked: [OutgoingChange] = []
        var position: [String: Int] = [:]
        var room = roomInFlight
        for change in changes {
            guard liveChannel(of: change.bucket) != nil, !sentOnConnection.contains(change.ccid) else { continue }
            if let earlier = position[change.ccid] {
                picked[earlier] = change
                continue
            }
            if room <= 0 && change.state == .queued {
                heldBack.insert(change.bucket)
                continue
            }
            room -= 1
            position[change.ccid] = picked.count
            picked.append(change)
        }
        guard !picked.isEmpty else { return }
        let going: [OutgoingChange]
        do {
            going = try store.markSent(picked, decodingAtMost: configuration.maxChangeFrameBytes)
        } catch {
            logger.error("marking sent failed: \(error)")
            return
        }
        var requests: [(channel: Int, requests: [ChangeRequest])] = []
        for change in going {
            guard let channel = liveChannel(of: change.bucket) else { continue }
            if change.leastRequestBytes > configuration.maxChangeFrameBytes {
                // Too large for any message, known from the store's text: not decoded and rendered
                // only to find so.
                keepBack(ccid: change.ccid, key: change.key, frameBytes: change.leastRequestBytes, bucket: change.bucket)
                continue
            }
            let request: ChangeRequest
            do {
                request = try Conversions.request(change, clientID: configuration.clientID)
            } catch {
                logger.error("cannot encode change \(change.ccid): \(error)")
                do {
                    try store.refuse(ccid: change.ccid, code: 400, reason: "cannot be encoded for the server (\(error)); kept locally")
                } catch {
                    logger.error("recording that \(change.ccid) cannot be encoded failed: \(error)")
                }
                continue
            }
            if let group = requests.firstIndex(where: { $0.channel == channel }) {
                requests[group].requests.append(request)
            } else {
                requests.append((channel, [request]))
            }
        }
        var frames: [String] = []
        for (channel, requests) in requests {
            let packed = ChangeRequest.frames(requests, channel: channel, maxBytes: configuration.maxChangeFrameBytes)
            frames += packed.frames
            sentOnConnection.formUnion(requests.map(\.ccid))
            for (change, frameBytes) in packed.tooLarge {
                sentOnConnection.remove(change.ccid)
                keepBack(ccid: change.ccid, key: change.id, frameBytes: frameBytes, bucket: machines[channel].bucket)
            }
        }
        for frame in frames { await write(frame) }
    }

    /// How many more changes may be written now within `maxChangesInFlight`.
    var roomInFlight: Int { configuration.maxChangesInFlight - sentOnConnection.count }

    /// Queued changes a full window held back go out once answers have emptied half of it,
    /// oldest first, as many as fit: under a long burst, each frame then carries many changes
    /// and each answer many acknowledgements, instead of one apiece.
    func sendHeldBack() async {
        guard !heldBack.isEmpty, connection != nil else { return }
        let half = max(configuration.maxChangesInFlight / 2, 1)
        for bucket in heldBack.sorted() {
            let room = roomInFlight
            guard room >= half else { return }
            // A bucket not in sync sends everything it owes when it is (`sendOwed`).
            guard liveChannel(of: bucket) != nil else {
                heldBack.remove(bucket)
                continue
            }
            do {
                let next = try store.queuedChanges(bucket: bucket, limit: room)
                if next.count < room { heldBack.remove(bucket) }
                await send(next)
            } catch {
                logger.error("reading the queued changes of \(bucket) failed: \(error)")
            }
        }
    }

    /// A change too large for any frame the server takes: sending it would only make the server
    /// close the connection, again at every reconnect, and nothing else would sync. It is kept
    /// locally and shown as refused for its size; the next save of the file tries again.
    /// `frameBytes`: the change's frame, or (known before rendering it) at least that many.
    private func keepBack(ccid: String, key: String, frameBytes: Int, bucket: String) {
        let reason = SyncStore.tooLargeToSend(bytes: frameBytes, limit: configuration.maxChangeFrameBytes)
        logger.warning("\(bucket)/\(key) not sent: \(reason)")
        do {
            try store.refuse(ccid: ccid, code: 413, reason: reason)
        } catch {
            logger.error("recording that \(ccid) is too large failed: \(error)")
        }
    }

    func publishProgress(channel: Int) {
        let machine = machines[channel]
        progressBroadcaster.publish(
            SyncProgress(
                bucket: machine.bucket, entitiesDone: machine.entitiesDone, entitiesKnown: machine.entitiesKnown,
                bytesReceived: machine.bytesReceived, isReady: machine.isReady))
    }
}
