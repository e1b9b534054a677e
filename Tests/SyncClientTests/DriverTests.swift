import Foundation
import JSONDiff
import Logging
import Synchronization
import SyncProtocol
import SyncStore
import Testing
@testable import SyncClient

/// Collects what the engine writes, instead of a socket.
final class RecordingWriter: WebSocketWriting {
    private let frames = Mutex<[String]>([])
    private let closed = Mutex(false)

    func write(_ text: String) async throws { frames.withLock { $0.append(text) } }
    func close() async { closed.withLock { $0 = true } }

    var written: [String] { frames.withLock { $0 } }
    var isClosed: Bool { closed.withLock { $0 } }
    func take() -> [String] { frames.withLock { frames in defer { frames.removeAll() }; return frames } }
}

/// The engine's message handling driven frame by frame (server frames in, client frames out),
/// covering the server-to-client commands our own server never sends (`index`, `log`).
@Suite("SyncClient driver with a recording writer", .timeLimit(.minutes(1)))
struct DriverTests {
    func makeClient(_ directory: TemporaryDirectory, configure: (inout SyncClientConfiguration) -> Void = { _ in }) throws -> (SyncClient, SyncStore) {
        let store = try SyncStore(path: directory.file("driver.sqlite"))
        var configuration = SyncClientConfiguration(
            serverURL: "ws://127.0.0.1:9", appID: "app", buckets: ["notes"], clientID: "driver-test",
            token: { String(repeating: "t", count: 32) })
        configure(&configuration)
        var logger = Logger(label: "driver")
        logger.logLevel = .critical
        return (try SyncClient(configuration: configuration, store: store, logger: logger), store)
    }

    /// A client whose connection is open, authorized and past an empty first index.
    func syncedClient(
        _ directory: TemporaryDirectory, configure: (inout SyncClientConfiguration) -> Void = { _ in }
    ) async throws -> (client: SyncClient, store: SyncStore, writer: RecordingWriter, connection: Int) {
        let (client, store) = try makeClient(directory, configure: configure)
        let writer = RecordingWriter()
        let id = await client.opened(writer: writer)
        await client.receive("0:auth:alice@example.com", connectionID: id)
        await client.receive(#"0:i:{"current":"cv1","index":[]}"#, connectionID: id)
        _ = writer.take()
        return (client, store, writer, id)
    }

    @Test func firstSyncThenOwedChangeThenRemoteIndexAndLogging() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let (client, store) = try makeClient(directory)
        defer { try? store.close() }
        _ = try await client.save(bucket: "notes", key: "mine", value: ["x": 1])
        let writer = RecordingWriter()
        let id = await client.opened(writer: writer)
        let initFrame = try #require(writer.take().first)
        #expect(initFrame.hasPrefix("0:init:"))
        #expect(initFrame.contains("\"name\":\"notes\""))
        #expect(initFrame.contains("\"clientid\":\"driver-test\""))
        await client.receive("0:auth:alice@example.com", connectionID: id)
        #expect(writer.take() == ["0:i:1:::1000"])
        await client.receive(#"0:i:{"current":"cv1","index":[{"id":"a","v":3,"d":{"t":"x"}},{"id":"b","v":1}]}"#, connectionID: id)
        let afterIndex = writer.take()
        #expect(afterIndex.contains("0:e:b.1"))
        let change = try #require(afterIndex.first { $0.hasPrefix("0:c:") })
        #expect(change.contains("\"id\":\"mine\""))
        await client.receive("0:e:b.1\n{\"data\":{\"y\":2}}", connectionID: id)
        #expect(try store.entity(bucket: "notes", key: "b")?.value == ["y": 2])
        #expect(try store.bucket(named: "notes")?.cv == "cv1")

        // The server asks for the local index: versions plus the pending change.
        await client.receive("0:index", connectionID: id)
        let reply = try #require(writer.take().first)
        #expect(reply.hasPrefix("0:index:"))
        let index = try SyncProtocol.LocalIndex(payload: String(reply.dropFirst("0:index:".count)))
        #expect(index.current == "cv1")
        #expect(Set(index.index.map(\.id)) == ["a", "b"])
        #expect(index.pending.map(\.id) == ["mine"])

        // Remote logging on: messages are mirrored as log:{"log":...}; off again: silence.
        await client.receive("log:2", connectionID: id)
        _ = writer.take()
        await client.receive("0:c:[]", connectionID: id)
        #expect(writer.take().contains { $0.hasPrefix("log:{\"log\":") })
        await client.receive("log:0", connectionID: id)
        _ = writer.take()
        await client.receive("0:c:[]", connectionID: id)
        #expect(writer.take().isEmpty)
    }

    @Test func ackMatchesByCCIDAndHeartbeatCountsFollowServer() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let (client, store, writer, id) = try await syncedClient(directory) {
            $0.heartbeatInterval = .milliseconds(40)
            $0.heartbeatTimeout = .milliseconds(80)
        }
        defer { try? store.close() }
        var acknowledgements = client.acknowledgements().makeAsyncIterator()
        let saved = try await client.save(bucket: "notes", key: "k", value: ["n": 1])
        let ccid = try #require(saved.readyToSend?.ccid)
        #expect(writer.take().first?.contains(ccid) == true)
        await client.receive(#"0:c:[{"clientid":"driver-test","id":"k","o":"M","v":{"n":{"o":"+","v":1}},"ev":1,"cv":"cv2","ccids":[""# + ccid + #""]}]"#, connectionID: id)
        #expect(try store.entity(bucket: "notes", key: "k")?.state == .synced)
        #expect(try store.bucket(named: "notes")?.cv == "cv2")
        // The acknowledgement is published after the store recorded it.
        let acknowledged = await acknowledgements.next()
        #expect(acknowledged == ChangeAcknowledgement(bucket: "notes", key: "k", ccid: ccid, version: 1))

        try await Task.sleep(for: .milliseconds(60))
        #expect(await client.heartbeatTick(connectionID: id))
        #expect(writer.take() == ["h:0"])
        await client.receive("h:1", connectionID: id)
        try await Task.sleep(for: .milliseconds(60))
        #expect(await client.heartbeatTick(connectionID: id))
        #expect(writer.take() == ["h:2"])
        // No answer: the connection is declared dead.
        try await Task.sleep(for: .milliseconds(100))
        #expect(await client.heartbeatTick(connectionID: id) == false)
    }

    @Test func changesSentTogetherGoOutAsOneFrame() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let (client, store, writer, _) = try await syncedClient(directory)
        defer { try? store.close() }
        // Saves made while the engine was busy (the mount hands them over in batches).
        let changes = try ["a", "b", "c"].map { key in
            try #require(try store.saveLocal(bucket: "notes", key: key, value: ["k": .string(key)]).readyToSend)
        }
        await client.send(changes)
        let frames = writer.take()
        #expect(frames.count == 1)
        let frame = try #require(frames.first)
        #expect(frame.hasPrefix("0:c:["))
        let requests = try ChangeRequest.parseAll(payload: String(frame.dropFirst("0:c:".count)))
        #expect(requests.map(\.ccid) == changes.map(\.ccid))
        #expect(try changes.allSatisfy { try store.entity(bucket: "notes", key: $0.key)?.state == .pending })
        // A lone change is the object form, which every server takes.
        let lone = try #require(try store.saveLocal(bucket: "notes", key: "d", value: ["k": 1]).readyToSend)
        await client.send([lone])
        #expect(writer.take().first?.hasPrefix("0:c:{") == true)
    }

    @Test func oneAnswerToABurstPublishesEachAcknowledgementWithItsOwnKeyAndVersion() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let (client, store, writer, id) = try await syncedClient(directory)
        defer { try? store.close() }
        var acknowledgements = client.acknowledgements().makeAsyncIterator()
        let keys = (0..<40).map { "k\($0)" }
        let changes = try keys.map { key in
            try #require(try store.saveLocal(bucket: "notes", key: key, value: ["k": .string(key)]).readyToSend)
        }
        await client.send(changes)
        #expect(writer.take().count == 1)
        // The server's answer, in another order than the changes went out, each at a version of
        // its own; the first ccid is also covered by a second, later change of the same entity.
        let answered = Array(changes.enumerated()).reversed()
        var answer = answered.map { index, change in
            #"{"clientid":"driver-test","id":""# + change.key + #"","o":"M","v":{"k":{"o":"+","v":""# + change.key
                + #""}},"ev":\#(index + 1),"cv":"cv\#(index)","ccids":[""# + change.ccid + #""]}"#
        }
        answer.append(
            #"{"clientid":"driver-test","id":"k0","o":"M","v":{},"ev":2,"sv":1,"cv":"cv-last","ccids":[""# + changes[0].ccid + #""]}"#)
        await client.receive("0:c:[" + answer.joined(separator: ",") + "]", connectionID: id)
        var published: [String: ChangeAcknowledgement] = [:]
        for _ in changes {
            let acknowledged = try #require(await acknowledgements.next())
            published[acknowledged.ccid] = acknowledged
        }
        for (index, change) in changes.enumerated() {
            #expect(try store.entity(bucket: "notes", key: change.key)?.state == .synced)
            // The last change covering a ccid gives the version (k0's second one: 2).
            let version = index == 0 ? 2 : index + 1
            #expect(published[change.ccid] == ChangeAcknowledgement(bucket: "notes", key: change.key, ccid: change.ccid, version: version))
        }
    }

    @Test func aChangeHandedOverTwiceGoesOutOnce() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let (client, store, writer, _) = try await syncedClient(directory)
        defer { try? store.close() }
        // The mount's copy still says `queued` when the owed-changes copy has gone out.
        let change = try #require(try store.saveLocal(bucket: "notes", key: "a", value: ["k": 1]).readyToSend)
        #expect(change.state == .queued)
        await client.send(try store.outgoingChanges(bucket: "notes"))
        #expect(writer.take().count == 1)
        await client.send([change])
        #expect(writer.take().isEmpty)
        #expect(try store.outgoingChanges(bucket: "notes").map(\.ccid) == [change.ccid])
    }

    @Test func initCanCarryTheFirstCommand() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let (client, store) = try makeClient(directory) { $0.sendCommandInInit = true }
        defer { try? store.close() }
        let writer = RecordingWriter()
        let id = await client.opened(writer: writer)
        let initFrame = try #require(writer.take().first)
        #expect(initFrame.contains("\"cmd\":\"i:1:::1000\""))
        await client.receive("0:auth:alice@example.com", connectionID: id)
        #expect(writer.take().isEmpty)
    }

    @Test func unreadableServerFramesAreIgnored() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let (client, store) = try makeClient(directory)
        defer { try? store.close() }
        let writer = RecordingWriter()
        let id = await client.opened(writer: writer)
        _ = writer.take()
        await client.receive("garbage", connectionID: id)
        await client.receive("7:auth:x@y.z", connectionID: id)
        await client.receive("0:c:{not json", connectionID: id)
        await client.receive("0:auth:alice@example.com", connectionID: id)
        #expect(writer.take() == ["0:i:1:::1000"])
    }
}
