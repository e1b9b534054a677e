import BucketFS
import Synchronization
import SyncStore

/// `--fsync-waits-for-server`: a change is acknowledged once the store holds no change of it
/// for the server (the engine records each acknowledgement there, in order), so fsync asks the
/// store, not the connection; the connection only says whether waiting can help at all.
final class StoreAcknowledgements: ServerAcknowledgement {
    private let store: SyncStore
    /// Whether the engine is connected, and why not (kept by the mount's connection reporter).
    private let connection = Mutex<(connected: Bool, reason: String)>((false, "not connected yet"))

    init(store: SyncStore) {
        self.store = store
    }

    func connectionChanged(connected: Bool, reason: String) {
        connection.withLock { $0 = (connected, reason) }
    }

    func waitForServer(bucket: String, key: String?, timeout: Double) async -> ServerAcknowledgementOutcome {
        let (connected, reason) = connection.withLock { $0 }
        let deadline = ContinuousClock.now + .milliseconds(Int(timeout * 1000))
        while true {
            switch progress(bucket: bucket, key: key) {
            case .done: return .acknowledged
            case .unsendable(let why): return .notSendable(reason: why)
            case .waiting: if !connected { return .offline(reason: reason) }
            }
            if ContinuousClock.now >= deadline { return .timedOut }
            try? await Task.sleep(for: .milliseconds(10))
        }
    }

    private enum Progress {
        case done
        case waiting
        case unsendable(String)
    }

    private func progress(bucket: String, key: String?) -> Progress {
        do {
            if let key {
                guard let entity = try store.entity(bucket: bucket, key: key) else { return .done }
                switch entity.state {
                case .invalid, .rejected: return .unsendable("\(entity.state): \(entity.reason ?? "")")
                case .synced where !entity.deletedPending: return .done
                default: return .waiting
                }
            }
            // A bucket: every change waiting for the server (files that cannot be sent have none).
            let owed = try store.unsyncedEntities().contains { $0.bucket == bucket && $0.awaitsServer }
            return owed ? .waiting : .done
        } catch {
            return .waiting
        }
    }
}
