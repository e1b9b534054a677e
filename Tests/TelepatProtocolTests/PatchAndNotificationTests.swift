import JSONDiff
import TelepatProtocol
import Testing

private func path(_ key: String) -> TelepatPatchPath { TelepatPatchPath(model: "task", id: "i1", key: key) }

@Suite("Telepat patches and notifications")
struct PatchAndNotificationTests {
    let object: JSONObject = ["id": .string("i1"), "type": .string("task"), "title": .string("a"), "n": .integer(1), "tags": .array([]), "modified": .integer(5)]

    @Test func everyOperationApplies() throws {
        let patched = try TelepatObject.applying([
            TelepatPatch(.replace, path: path("title"), value: .string("b")),
            TelepatPatch(.increment, path: path("n"), value: .integer(2)),
            TelepatPatch(.increment, path: path("fresh"), value: .double(0.5)),
            TelepatPatch(.append, path: path("tags"), value: .string("x")),
            TelepatPatch(.append, path: path("title"), value: .string("c")),
            TelepatPatch(.remove, path: path("type2")),
            TelepatPatch(.remove, path: path("tags")),
        ], to: object, model: "task", id: "i1", now: 9)
        #expect(patched["title"] == .string("bc"))
        #expect(patched["n"] == .integer(3))
        #expect(patched["fresh"] == .double(0.5))
        #expect(patched["tags"] == nil)
        #expect(patched["modified"] == .integer(9))
        #expect(patched["id"] == .string("i1"))
    }

    @Test func aPatchThatChangesNothingKeepsModified() throws {
        let same = try TelepatObject.applying([TelepatPatch(.replace, path: path("title"), value: .string("a"))], to: object, model: "task", id: "i1", now: 9)
        #expect(same == object)
    }

    @Test(arguments: Array(TelepatObject.immutableFields))
    func immutableFieldsAreRefused(key: String) {
        #expect(throws: TelepatPatchError.immutableField(key)) {
            try TelepatObject.applying([TelepatPatch(.replace, path: path(key), value: .string("z"))], to: object, model: "task", id: "i1", now: 9)
        }
    }

    @Test func mismatchesAreRefused() {
        #expect(throws: TelepatPatchError.self) {
            try TelepatObject.applying([TelepatPatch(.increment, path: path("title"), value: .integer(1))], to: object, model: "task", id: "i1", now: 9)
        }
        #expect(throws: TelepatPatchError.self) {
            try TelepatObject.applying([TelepatPatch(.append, path: path("n"), value: .integer(1))], to: object, model: "task", id: "i1", now: 9)
        }
        #expect(throws: TelepatPatchError.wrongTarget(TelepatPatchPath(model: "task", id: "other", key: "k"))) {
            try TelepatObject.applying([TelepatPatch(.replace, path: TelepatPatchPath(model: "task", id: "other", key: "k"), value: .null)], to: object, model: "task", id: "i1", now: 9)
        }
    }

    @Test func patchesBetweenTwoObjectsReplaceAndRemoveChangedKeys() throws {
        var new = object
        new["title"] = .string("b")
        new["n"] = nil
        new["added"] = .bool(true)
        new["modified"] = .integer(99)
        let patches = TelepatObject.patches(from: object, to: new, model: "task", id: "i1")
        #expect(patches == [
            TelepatPatch(.replace, path: path("added"), value: .bool(true)),
            TelepatPatch(.remove, path: path("n")),
            TelepatPatch(.replace, path: path("title"), value: .string("b")),
        ])
        var applied = try TelepatObject.applying(patches, to: object, model: "task", id: "i1", now: 99)
        applied["modified"] = .integer(99)
        #expect(applied == new)
    }

    @Test func createdObjectsCarryTheServersFields() {
        let created = TelepatObject.created(content: ["title": .string("t"), "id": .string("mine")], id: "u", model: "task", context: "c", applicationID: "app", userID: "7", now: 3)
        #expect(created["id"] == .string("u"))
        #expect(created["type"] == .string("task"))
        #expect(created["context_id"] == .string("c"))
        #expect(created["application_id"] == .string("app"))
        #expect(created["user_id"] == .string("7"))
        #expect(created["created"] == .integer(3) && created["modified"] == .integer(3))
    }

    @Test func theSeedsNotificationsParseAndRoundTrip() throws {
        let seedUpdate = #"""
        {"data":{"new":[],"updated":[{"op":"update","subscriptions":["blg:app:context:c:model"],"application_id":"app","timestamp":1473175260988508,
        "patch":{"op":"replace","path":"model/5fed/title","value":"changed text"}}],"deleted":[]}}
        """#
        let notification = try TelepatNotification(parsing: JSONValue(parsing: seedUpdate))
        #expect(notification.updated.count == 1)
        #expect(notification.updated[0].patch == TelepatPatch(.replace, path: TelepatPatchPath(model: "model", id: "5fed", key: "title"), value: .string("changed text")))
        #expect(notification.updated[0].timestamp == 1473175260988508)
        #expect(try TelepatNotification(parsing: notification.json) == notification)

        let created = TelepatNotification(new: [.created(["id": .string("x")], subscriptions: ["s"], applicationID: "app", timestamp: 1)],
                                          deleted: [.deleted(["id": .string("y")], subscriptions: ["s"], applicationID: "app", timestamp: 2)])
        let event = TelepatSocketEvent.message(created)
        #expect(try TelepatSocketEvent.parse(frame: event.frame) == event)
    }

    @Test(arguments: ["{}", #"{"data":[]}"#, #"{"data":{"new":{}}}"#, #"{"data":{"updated":[{"patch":{"op":"x","path":"a/b/c"}}]}}"#])
    func malformedNotificationsAreRefused(text: String) throws {
        let value = try JSONValue(parsing: text)
        #expect(throws: TelepatProtocolError.self) { try TelepatNotification(parsing: value) }
    }
}
