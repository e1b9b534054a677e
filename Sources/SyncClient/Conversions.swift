import JSONDiff
import SyncProtocol
import SyncStore

/// Mapping between the protocol's messages and the store's records.
enum Conversions {
    static func remoteChange(_ change: AppliedChange) -> RemoteChange {
        let operation: RemoteChange.Operation
        switch change.operation {
        case .remove: operation = .remove
        case .modify: operation = .modify(diff: change.diff.flatMap { JSONDiffing.encode($0).objectValue } ?? [:])
        }
        return RemoteChange(
            key: change.id, operation: operation, sourceVersion: change.sourceVersion, endVersion: change.endVersion,
            cv: change.changeVersion, clientID: change.clientID, ccids: change.ccids, data: change.data)
    }

    static func request(_ change: OutgoingChange, clientID: String) throws -> ChangeRequest {
        switch change.operation {
        case .remove:
            return ChangeRequest(
                clientID: clientID, id: change.key, operation: .remove, diff: nil, sourceVersion: change.sourceVersion,
                ccid: change.ccid, data: nil)
        case .modify(let diff):
            return ChangeRequest(
                clientID: clientID, id: change.key, operation: .modify, diff: try JSONDiffing.decode(.object(diff)),
                sourceVersion: change.sourceVersion, ccid: change.ccid, data: change.fullData)
        }
    }

    static func indexEntries(_ page: IndexPage) -> [IndexEntry] {
        page.index.map { IndexEntry(key: $0.id, version: $0.version, data: $0.data) }
    }

    static func localIndex(_ snapshot: IndexSnapshot) -> SyncProtocol.LocalIndex {
        SyncProtocol.LocalIndex(
            current: snapshot.cv,
            index: snapshot.index.map { IndexPage.Entry(id: $0.key, version: $0.version) },
            pending: snapshot.pending.map { .init(id: $0.key, sourceVersion: $0.sourceVersion, ccid: $0.ccid) })
    }
}
