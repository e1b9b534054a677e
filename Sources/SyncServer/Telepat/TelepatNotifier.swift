import Foundation
import JSONDiff
import Logging
import SyncProtocol
import TelepatProtocol

/// Turns committed changes (from either protocol) into Telepat notifications for the devices
/// subscribed to their bucket, one change at a time in commit order.
final class TelepatNotifier: Sendable {
    private let continuation: AsyncStream<(Int64, StoredChange)>.Continuation
    private let task: Task<Void, Never>

    init(store: any ServerStorage, devices: TelepatDevices, logger: Logger) {
        let (stream, continuation) = AsyncStream<(Int64, StoredChange)>.makeStream()
        self.continuation = continuation
        self.task = Task {
            for await (bucketID, change) in stream {
                do {
                    try await Self.notify(bucketID: bucketID, change: change, store: store, devices: devices)
                } catch {
                    logger.error("Telepat notification failed", metadata: ["key": "\(change.key)", "error": "\(error)"])
                }
            }
        }
    }

    deinit {
        continuation.finish()
        task.cancel()
    }

    /// Called in the store's delivery sequence (commit order); the work happens off it.
    func changed(bucketID: Int64, change: StoredChange, devices: TelepatDevices) {
        guard devices.hasSubscribers(bucketID: bucketID) else { return }
        continuation.yield((bucketID, change))
    }

    private static func notify(bucketID: Int64, change: StoredChange, store: any ServerStorage, devices: TelepatDevices) async throws {
        let subscribers = devices.subscribers(bucketID: bucketID)
        guard let any = subscribers.first?.subscriptions.first else { return }
        let bucket = any.bucket
        let timestamp = Int64(Date().timeIntervalSince1970 * 1_000_000)
        enum Event { case new(JSONObject), updated(JSONObject, [TelepatPatch]), deleted(JSONObject) }
        let event: Event
        switch change.operation {
        case .remove:
            let old = try await change.sourceVersion.asyncMap { try await store.entityVersion(bucket: bucket, key: change.key, version: $0) }
            event = .deleted(old??.data ?? [:])
        case .modify:
            guard let new = try await store.entityVersion(bucket: bucket, key: change.key, version: change.endVersion)?.data else { return }
            if change.sourceVersion == nil {
                event = .new(new)
            } else {
                // Only `replace`: the SDK applies nothing else, and Telepat 0.4 has no property
                // removal; a key removed (through Simperium, or from a mounted file) is set to null.
                event = .updated(new, (change.diff ?? [:]).keys.sorted().map { key in
                    TelepatPatch(.replace, path: TelepatPatchPath(model: "", id: change.key, key: key.string), value: new[key] ?? .null)
                })
            }
        }
        for (_, outbox, subscriptions) in subscribers {
            guard let outbox else { continue }
            var notification = TelepatNotification()
            for subscription in subscriptions {
                let model = subscription.channel.model
                // Each channel under its own key: the SDK files a notification by the key.
                let keys = [subscription.key]
                let app = subscription.applicationID
                switch event {
                case .new(let data):
                    let object = TelepatFrontEnd.view(data, key: change.key, subscription: subscription)
                    guard subscription.includes(object) else { continue }
                    notification.new.append(.created(object, subscriptions: keys, applicationID: app, timestamp: timestamp))
                case .updated(let data, let patches):
                    guard subscription.includes(TelepatFrontEnd.view(data, key: change.key, subscription: subscription)) else { continue }
                    for patch in patches {
                        var patch = patch
                        patch.path.model = model
                        notification.updated.append(.updated(patch, subscriptions: keys, applicationID: app, timestamp: timestamp))
                    }
                case .deleted(let data):
                    let object = TelepatFrontEnd.view(data, key: change.key, subscription: subscription)
                    guard subscription.includes(object) else { continue }
                    notification.deleted.append(.deleted(object, subscriptions: keys, applicationID: app, timestamp: timestamp))
                }
            }
            if !notification.isEmpty { outbox.enqueue(TelepatSocketEvent.message(notification).frame) }
        }
    }
}

extension Optional {
    fileprivate func asyncMap<T>(_ transform: (Wrapped) async throws -> T) async rethrows -> T? {
        guard let value = self else { return nil }
        return try await transform(value)
    }
}
