import Foundation
import JSONDiff
import Testing
import TelepatProtocol
@testable import TelepatClient

/// What a save in a Telepat mount asks of the server.
@Suite("Telepat saves", .timeLimit(.minutes(1)))
struct TelepatSaveTests {
    let object: JSONObject = [
        "id": "u1", "type": "posts", "context_id": "c1", "application_id": "a1", "created": 1, "modified": 2,
        "title": "old", "tags": ["x"],
    ]

    @Test func changedKeysBecomeReplaceAndRemovePatches() {
        var edited = object
        edited["title"] = "new"
        edited["tags"] = nil
        edited["extra"] = 5
        let plan = TelepatSave.plan(key: "u1", model: "posts", onServer: true, ghost: object, value: edited)
        let path = { (key: String) in TelepatPatchPath(model: "posts", id: "u1", key: key) }
        #expect(plan == .update(id: "u1", patches: [
            TelepatPatch(.replace, path: path("extra"), value: 5), TelepatPatch(.remove, path: path("tags")),
            TelepatPatch(.replace, path: path("title"), value: "new"),
        ]))
    }

    @Test func anImmutableFieldEditedIsRefusedWithItsName() {
        for field in ["id", "type", "created", "modified", "application_id", "context_id"] {
            var edited = object
            edited[JSONKey(field)] = "changed"
            guard case .refused(let reason) = TelepatSave.plan(key: "u1", model: "posts", onServer: true, ghost: object, value: edited)
            else {
                Issue.record("an edit of \(field) was not refused")
                continue
            }
            #expect(reason.contains("`\(field)`"))
        }
        var removed = object
        removed["created"] = nil
        #expect({ if case .refused = TelepatSave.plan(key: "u1", model: "posts", onServer: true, ghost: object, value: removed) { true } else { false } }())
    }

    @Test func aNewFileIsACreateUnlessItSetsAServerField() {
        let content: JSONObject = ["title": "hello"]
        #expect(TelepatSave.plan(key: "draft", model: "posts", onServer: false, ghost: [:], value: content) == .create(content: content))
        guard case .refused = TelepatSave.plan(key: "draft", model: "posts", onServer: false, ghost: [:], value: object) else {
            Issue.record("a new object carrying an id was not refused")
            return
        }
        #expect(TelepatSave.plan(key: "u1", model: "posts", onServer: true, ghost: object, value: nil) == .delete(id: "u1"))
        // The server's object for a create holds every field sent, plus its own.
        #expect(TelepatSave.created(object, matches: ["title": "old", "tags": ["x"]]))
        #expect(!TelepatSave.created(object, matches: ["title": "other"]))
    }

    @Test func theSocketURLFollowsTheAPIsScheme() {
        let plain = TelepatConfiguration(serverURL: "http://h:3000/", appID: "a", apiKey: "k", login: .token("t"), buckets: [])
        #expect(plain.socketURL == "ws://h:3000/socket.io/?EIO=3&transport=websocket")
        let secure = TelepatConfiguration(serverURL: "https://h", appID: "a", apiKey: "k", login: .token("t"), buckets: [])
        #expect(secure.socketURL == "wss://h/socket.io/?EIO=3&transport=websocket")
    }

    @Test func aTokensExpiryIsReadFromItsClaims() {
        func part(_ json: String) -> String {
            Data(json.utf8).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
                .replacingOccurrences(of: "=", with: "")
        }
        let token = part(#"{"alg":"HS256","typ":"JWT"}"#) + "." + part(#"{"exp":1795628731,"id":"u?>"}"#) + ".signature"
        #expect(JWTExpiry.of(token) == Date(timeIntervalSince1970: 1_795_628_731))
        #expect(JWTExpiry.of("not a jwt") == nil)
        #expect(JWTExpiry.of(part(#"{"alg":"HS256"}"#) + "." + part(#"{"id":1}"#) + ".s") == nil)
    }

    /// Renewed the margin before it expires, or halfway through a life shorter than two margins.
    @Test func aTokenIsRenewedBeforeItExpires() {
        func token(_ claims: String) -> String {
            let part = Data(claims.utf8).base64EncodedString().replacingOccurrences(of: "=", with: "")
            return "e30." + part + ".s"
        }
        let hour = token(#"{"iat":1000,"exp":4600}"#)
        #expect(JWTExpiry.renewal(of: hour, margin: .seconds(300)) == Date(timeIntervalSince1970: 4300))
        let short = token(#"{"iat":1000,"exp":1020}"#)
        #expect(JWTExpiry.renewal(of: short, margin: .seconds(300)) == Date(timeIntervalSince1970: 1010))
        let noIssue = token(#"{"exp":1020}"#)
        #expect(JWTExpiry.renewal(of: noIssue, margin: .seconds(300)) == Date(timeIntervalSince1970: 720))
        #expect(JWTExpiry.renewal(of: token(#"{"iat":1000}"#), margin: .seconds(300)) == nil)
    }
}
