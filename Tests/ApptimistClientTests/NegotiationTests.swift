import ApptimistCrypto
import ApptimistProtocol
import Foundation
import SyncStore
import Testing

@testable import ApptimistClient

/// The version a connection speaks: the server's answer to the offer, never below what this
/// mount's store has seen from it (so an attacker on the plain ws:// path cannot strip the offer).
@Suite struct NegotiationTests {
    /// An engine over a fresh store; `versions` is what its pinned service key lists (none: a
    /// seed service's document, which does not say).
    func engine(versions: [ApptimistVersion] = []) throws -> (ApptimistClient, String) {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("apptimist-\(UUID().uuidString).sqlite").path
        let service = try ApptimistServiceKey(service: "notes", identity: try .generate(name: "service"), versions: versions)
        let configuration = ApptimistConfiguration(serverURL: "ws://127.0.0.1:9/notes", identity: try .generate(name: "alice"), service: service)
        return (try ApptimistClient(configuration: configuration, store: try SyncStore(path: path)), path)
    }

    @Test func aStoreThatHasSeenVersion2RefusesVersion1() async throws {
        let (client, path) = try engine()
        defer { removeStoreFiles(at: path) }
        // A server that never spoke version 2 to this mount: a seed server (no answer) is version 1.
        #expect(try await client.negotiated(nil) == .v1)
        #expect(try await client.negotiated("apptimist.v1") == .v1)
        #expect(try await client.negotiated("apptimist.v2") == .v2)
        // From now on, version 1 is a downgrade, whether answered outright or by no answer.
        await #expect(throws: ApptimistEngineError.self) { try await client.negotiated("apptimist.v1") }
        await #expect(throws: ApptimistEngineError.self) { try await client.negotiated(nil) }
        #expect(try await client.negotiated("apptimist.v2") == .v2)
        // A subprotocol that was not offered is refused too.
        await #expect(throws: ApptimistEngineError.self) { try await client.negotiated("chat") }

        // Kept in the store: a mount started again over it refuses version 1 as well.
        let again = try ApptimistClient(configuration: client.configuration, store: try SyncStore(path: path))
        await #expect(throws: ApptimistEngineError.self) { try await again.negotiated("apptimist.v1") }
    }

    /// A pinned service key that lists version 2 refuses version 1 from a fresh store's first
    /// connection: a store is not needed to have seen version 2 (a new mount of a saved remote).
    @Test func aPinnedKeyListingVersion2RefusesVersion1FromTheStart() async throws {
        let (client, path) = try engine(versions: [.v1, .v2])
        defer { removeStoreFiles(at: path) }
        await #expect(throws: ApptimistEngineError.self) { try await client.negotiated(nil) }
        await #expect(throws: ApptimistEngineError.self) { try await client.negotiated("apptimist.v1") }
        #expect(try await client.negotiated("apptimist.v2") == .v2)

        // The document as `GET /SERVICE` and `bucketfs apptimist service-key` give it lists the
        // versions; read back, it still does. One that lists only version 1, or a version this
        // bucketfs does not know, asks for no more than version 1.
        let key = client.configuration.service
        #expect(try ApptimistServiceKey(json: key.json()).versions == [.v2, .v1])
        var object = try #require(try JSONSerialization.jsonObject(with: key.json()) as? [String: Any])
        object["versions"] = ["apptimist.v1", "apptimist.v9"]
        let older = try ApptimistServiceKey(json: try JSONSerialization.data(withJSONObject: object))
        #expect(older.versions == [.v1])
        object["versions"] = nil
        #expect(try ApptimistServiceKey(json: try JSONSerialization.data(withJSONObject: object)).versions == [])
    }

    @Test func theMountShowsThreeDirectoriesOfBytes() throws {
        let (client, path) = try engine()
        defer { removeStoreFiles(at: path) }
        #expect(try client.store.buckets().map(\.name).sorted() == ["files", "messages", "outbox"])
        #expect(try client.store.fileFormat(ofBucket: "messages") as? BytesFieldFormat == BytesFieldFormat(readOnly: true))
        let files = try #require(try client.store.fileFormat(ofBucket: "files") as? BytesFieldFormat)
        #expect(!files.readOnly && files.isReadOnly(key: "author") && files.isReadOnly(key: "subscribers"))
    }

    @Test func aServerURLMustNameItsService() throws {
        for url in ["ws://127.0.0.1:9", "ws://127.0.0.1:9/", "http://127.0.0.1/notes", "wss://host/notes"] {
            #expect(throws: ApptimistEngineError.self) { try ApptimistSocket.Address(url: url) }
        }
        let address = try ApptimistSocket.Address(url: "ws://example.org/notes")
        #expect(address.port == 80 && address.path == "/notes" && address.host == "example.org")
    }
}
