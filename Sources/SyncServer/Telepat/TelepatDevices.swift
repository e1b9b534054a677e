import Foundation
import JSONDiff
import Logging
import NIOConcurrencyHelpers
import TelepatProtocol

/// Registered devices, the sockets bound to them, and what each device subscribed to.
final class TelepatDevices: Sendable {
    /// One subscription of a device: a channel of an application (and its filters), in the
    /// application's bucket for the channel's context and model.
    struct Subscription: Hashable, Sendable {
        var applicationID: String
        var channel: TelepatChannel
        var bucket: BucketHandle
        var filter: TelepatFilter?
        /// The channel's key (`SubscribeRequest.subscriptionKey`): what the subscription is
        /// known by, and what notifications for it name.
        var key: String

        /// Whether the subscription is about `object` (its channel and filters).
        func includes(_ object: JSONObject) -> Bool {
            channel.contains(object) && (filter?.matches(object) ?? true)
        }
    }

    private struct State {
        var devices: [String: JSONObject] = [:]
        var sockets: [String: Outbox] = [:]
        var subscriptions: [Int64: [String: Set<Subscription>]] = [:]
    }

    private let state = NIOLockedValueBox(State())
    private let file: JSONObjectFile

    init(path: String?, logger: Logger) {
        file = JSONObjectFile(path: path, holding: "Telepat devices", logger: logger)
        if let object = file.load() {
            state.withLockedValue { state in
                for (id, info) in object { state.devices[id.string] = info.objectValue ?? [:] }
            }
        }
    }

    /// Registers or updates a device: `existing` when it is known (the UDID header or the
    /// device's own `info.udid`), a new UUID otherwise. Returns the identifier.
    func register(existing: String?, registration: DeviceRegistration) -> String {
        state.withLockedValue { state in
            let known = [existing, registration.udid].compactMap { $0 }.first { state.devices[$0] != nil }
            let id = known ?? registration.udid ?? UUID().uuidString.lowercased()
            state.devices[id] = registration.json.objectValue ?? [:]
            // Under the lock, so the file never goes back to an older list (registrations are rare).
            persist(JSONObject(uniqueKeysWithValues: state.devices.map { (JSONKey($0.key), JSONValue.object($0.value)) }))
            return id
        }
    }

    private func persist(_ snapshot: JSONObject) {
        file.save(snapshot)
    }

    /// Whether `/device/register` gave (or took) this identifier.
    func isRegistered(_ device: String) -> Bool {
        state.withLockedValue { $0.devices[device] != nil }
    }

    /// Binds a socket to a device (a later bind of the same device replaces it).
    func bind(device: String, outbox: Outbox) {
        state.withLockedValue { $0.sockets[device] = outbox }
    }

    func unbind(device: String, outbox: Outbox) {
        state.withLockedValue { state in
            if state.sockets[device] === outbox { state.sockets[device] = nil }
        }
    }

    /// Subscribes a device to a channel. A channel is known by its key, filters included: a
    /// filtered channel is one of its own, held beside the plain one (a subscription with the
    /// same key is replaced).
    func subscribe(device: String, _ subscription: Subscription) {
        state.withLockedValue { state in
            var mine = state.subscriptions[subscription.bucket.id]?[device] ?? []
            mine = mine.filter { $0.key != subscription.key }
            mine.insert(subscription)
            state.subscriptions[subscription.bucket.id, default: [:]][device] = mine
        }
    }

    /// Ends the device's subscription to the channel of `key` (and to no other).
    func unsubscribe(device: String, key: String) {
        state.withLockedValue { state in
            for (bucketID, devices) in state.subscriptions {
                guard var mine = devices[device] else { continue }
                mine = mine.filter { $0.key != key }
                state.subscriptions[bucketID]?[device] = mine.isEmpty ? nil : mine
                if state.subscriptions[bucketID]?.isEmpty == true { state.subscriptions[bucketID] = nil }
            }
        }
    }

    /// The subscriptions on a bucket, by device, with the device's socket when one is bound.
    func subscribers(bucketID: Int64) -> [(device: String, outbox: Outbox?, subscriptions: Set<Subscription>)] {
        state.withLockedValue { state in
            (state.subscriptions[bucketID] ?? [:]).map { ($0.key, state.sockets[$0.key], $0.value) }
        }
    }

    func hasSubscribers(bucketID: Int64) -> Bool { state.withLockedValue { $0.subscriptions[bucketID] != nil } }
}
