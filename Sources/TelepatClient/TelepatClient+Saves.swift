import JSONDiff
import Logging
import SyncStore
import TelepatProtocol

extension TelepatClient {
    /// Sends what the store owes the subscribed buckets, oldest first, one request at a time.
    /// Stops at a failure that is not this change's own (offline, server error): the rest is
    /// sent again after the next subscribe.
    func flush() async {
        guard !sending else {
            flushAgain = true
            return
        }
        sending = true
        defer { sending = false }
        repeat {
            flushAgain = false
            for name in subscribed.sorted() {
                guard let bucket = buckets[name], let context = contextIDs[bucket.contextName] else { continue }
                let owed: [OutgoingChange]
                do { owed = try store.outgoingChanges(bucket: name) } catch {
                    logger.error("telepat: cannot read what \(name) owes: \(error)")
                    continue
                }
                for change in owed {
                    if case .rejected = change.state { continue }
                    if pendingCreates[name]?.contains(where: { $0.change.ccid == change.ccid }) == true { continue }
                    guard connected, subscribed.contains(name) else { return }
                    guard await send(change, bucket: bucket, context: context) else { return }
                }
            }
        } while flushAgain
    }

    /// Sends one change; false when sending should stop for now.
    private func send(_ change: OutgoingChange, bucket: TelepatBucket, context: String) async -> Bool {
        let plan: TelepatSave
        do {
            let entity = try store.entity(bucket: change.bucket, key: change.key)
            let ghost = entity?.ghost ?? [:]
            let value: JSONObject?
            switch change.operation {
            case .remove: value = nil
            case .modify(let diff):
                // Exactly this change's object: the ghost with its diff (later edits ride on the next).
                value = (try? JSONDiffing.apply(JSONDiffing.decode(.object(diff)), to: ghost)) ?? entity?.value
            }
            plan = TelepatSave.plan(
                key: change.key, model: bucket.model, onServer: change.sourceVersion != nil, ghost: ghost, value: value)
        } catch {
            logger.error("telepat: cannot read \(change.bucket)/\(change.key): \(error)")
            return false
        }
        do {
            switch plan {
            case .refused(let reason):
                logger.error("telepat: not sent, \(change.bucket)/\(change.key): \(reason)")
                try store.refuse(ccid: change.ccid, code: 400, reason: reason)
            case .create(let content):
                // Waiting before the request goes: its object's `new` notification may come on
                // the socket before the request's answer does.
                pendingCreates[change.bucket, default: []].append(PendingCreate(change: change, content: content))
                let request = CreateRequest(context: context, model: bucket.model, content: content)
                do {
                    _ = try await authorized { http, device, token in
                        try await http.call("/object/create", body: request.json, device: device, token: token)
                    }
                } catch {
                    pendingCreates[change.bucket]?.removeAll { $0.change.ccid == change.ccid }
                    throw error
                }
                // Unless its object came first and took its place, it is sent: a later mount
                // adopts the object rather than creating it again.
                if pendingCreates[change.bucket]?.contains(where: { $0.change.ccid == change.ccid }) == true {
                    try store.markSent(ccids: [change.ccid])
                }
            case .update(let id, let patches):
                if !patches.isEmpty {
                    let request = UpdateRequest(context: context, model: bucket.model, id: id, patches: patches)
                    _ = try await authorized { http, device, token in
                        try await http.call("/object/update", body: request.json, device: device, token: token)
                    }
                }
                if try mirror.acknowledge(change) { flushAgain = true }
            case .delete(let id):
                let request = DeleteRequest(context: context, model: bucket.model, id: id)
                do {
                    _ = try await authorized { http, device, token in
                        try await http.call("/object/delete", method: "DELETE", body: request.json, device: device, token: token)
                    }
                } catch {
                    // Gone already (404): what the removal wanted.
                    guard (error as? TelepatCallError)?.status == 404 else { throw error }
                }
                if try mirror.acknowledge(change) { flushAgain = true }
            }
            return true
        } catch let error as TelepatCallError {
            guard let status = error.status, (400..<500).contains(status), status != 401, status != 408, status != 429 else {
                logger.warning("telepat: \(change.bucket)/\(change.key) waits to be sent: \(error)")
                return false
            }
            let reason = status == 404 ? "the object is gone from the server (\(error))" : "\(error)"
            logger.error("telepat: refused, \(change.bucket)/\(change.key): \(reason)")
            do { try store.refuse(ccid: change.ccid, code: status, reason: reason) } catch {
                logger.error("telepat: cannot record the refusal of \(change.key): \(error)")
            }
            return true
        } catch {
            logger.error("telepat: \(change.bucket)/\(change.key) not recorded: \(error)")
            return false
        }
    }
}
