import JSONDiff
import TelepatProtocol
import Testing

private func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

@Suite("Telepat request bodies")
struct RequestTests {
    @Test func aDeviceRegistrationKeepsItsInfoAndUdid() throws {
        let request = try DeviceRegistration(parsing: bytes(#"{"info":{"os":"linux","udid":"u-1"},"persistent":{"type":"android","token":"t","active":1}}"#))
        #expect(request.udid == "u-1")
        #expect(request.info["os"] == .string("linux"))
        #expect(try DeviceRegistration(parsing: bytes(request.json.compactRendered())) == request)
        #expect(try DeviceRegistration(parsing: bytes(#"{"info":{}}"#)).udid == nil)
        #expect(throws: TelepatProtocolError.missingField("info")) { try DeviceRegistration(parsing: bytes("{}")) }
        #expect(throws: TelepatProtocolError.self) { try DeviceRegistration(parsing: bytes(#"{"info":{"udid":5}}"#)) }
    }

    @Test func credentialsKeepTheOtherProfileFields() throws {
        let request = try UserCredentialsRequest(parsing: bytes(#"{"username":"ann","password":"secret","name":"Ann"}"#))
        #expect(request.username == "ann" && request.password == "secret")
        #expect(request.profile == ["name": .string("Ann")])
        #expect(try UserCredentialsRequest(parsing: bytes(request.json.compactRendered())) == request)
        #expect(throws: TelepatProtocolError.missingField("password")) { try UserCredentialsRequest(parsing: bytes(#"{"username":"ann"}"#)) }
        #expect(throws: TelepatProtocolError.self) { try UserCredentialsRequest(parsing: bytes(#"{"username":"","password":"x"}"#)) }
    }

    @Test func aSubscriptionNamesItsChannel() throws {
        let request = try SubscribeRequest(parsing: bytes(
            #"{"channel":{"context":"c1","model":"task","user":"u"},"offset":10,"limit":5,"no_subscribe":true,"filters":{"and":[]}}"#
        ))
        #expect(request.channel == TelepatChannel(context: "c1", model: "task", user: "u"))
        #expect(request.offset == 10 && request.limit == 5 && request.noSubscribe)
        #expect(try SubscribeRequest(parsing: bytes(request.json.compactRendered())) == request)
        #expect(request.channel.subscriptionKey(applicationID: "app") == "blg:app:context:c1:users:u:task")
        #expect(TelepatChannel(context: "c1", model: "task").subscriptionKey(applicationID: "app") == "blg:app:context:c1:task")
    }

    @Test(arguments: [
        "", "[]", "{}", #"{"channel":{}}"#, #"{"channel":{"context":"c"}}"#, #"{"channel":{"context":"c","model":""}}"#,
        #"{"channel":{"context":"c","model":"m"},"limit":-1}"#, #"{"channel":"c"}"#, "{\"channel\":",
    ])
    func malformedSubscriptionsAreRefused(body: String) {
        #expect(throws: TelepatProtocolError.self) { try SubscribeRequest(parsing: bytes(body)) }
    }

    @Test func createUpdateDeleteAndCountRoundTrip() throws {
        let create = try CreateRequest(parsing: bytes(#"{"context":"c","model":"task","content":{"title":"a"}}"#))
        #expect(create.content == ["title": .string("a")])
        #expect(try CreateRequest(parsing: bytes(create.json.compactRendered())) == create)
        #expect(throws: TelepatProtocolError.self) { try CreateRequest(parsing: bytes(#"{"context":"c","model":"task","content":[1]}"#)) }

        let update = try UpdateRequest(parsing: bytes(
            #"{"context":"c","model":"task","id":"i1","patches":[{"op":"replace","path":"task/i1/title","value":"b"},{"op":"remove","path":"task/i1/done"}]}"#
        ))
        #expect(update.patches.count == 2)
        #expect(update.patches[1] == TelepatPatch(.remove, path: TelepatPatchPath(model: "task", id: "i1", key: "done")))
        #expect(try UpdateRequest(parsing: bytes(update.json.compactRendered())) == update)
        let implied = try UpdateRequest(parsing: bytes(#"{"context":"c","model":"task","patches":[{"op":"increment","path":"task/i9/n","value":2}]}"#))
        #expect(implied.id == "i9")

        let delete = try DeleteRequest(parsing: bytes(#"{"context":"c","model":"task","id":"i1"}"#))
        #expect(delete == DeleteRequest(context: "c", model: "task", id: "i1"))
        #expect(throws: TelepatProtocolError.missingField("id")) { try DeleteRequest(parsing: bytes(#"{"context":"c","model":"task"}"#)) }

        let count = try ChannelRequest(parsing: bytes(#"{"channel":{"context":"c","model":"task"}}"#))
        #expect(try ChannelRequest(parsing: bytes(count.json.compactRendered())) == count)
    }

    @Test(arguments: [
        #"{"context":"c","model":"m","id":"i","patches":[]}"#,
        #"{"context":"c","model":"m","id":"i"}"#,
        #"{"context":"c","model":"m","id":"i","patches":[{"op":"set","path":"m/i/k","value":1}]}"#,
        #"{"context":"c","model":"m","id":"i","patches":[{"op":"replace","path":"m/i","value":1}]}"#,
        #"{"context":"c","model":"m","id":"i","patches":[{"op":"replace","path":"m/i/k/deeper","value":1}]}"#,
        #"{"context":"c","model":"m","id":"i","patches":[{"op":"replace","path":"m/i/k"}]}"#,
        #"{"context":"c","model":"m","id":"i","patches":[{"op":"increment","path":"m/i/k","value":"1"}]}"#,
        #"{"context":"c","model":"m","id":"i","patches":[{"path":"m/i/k","value":1}]}"#,
        #"{"context":"c","model":"m","id":"i","patches":["replace"]}"#,
    ])
    func malformedPatchesAreRefused(body: String) {
        #expect(throws: TelepatProtocolError.self) { try UpdateRequest(parsing: bytes(body)) }
    }

    @Test func answersParseAndRender() throws {
        let error = TelepatErrorResponse(.invalidAPIKey, "bad sign")
        #expect(error.status == 401)
        #expect(error.json.compactRendered() == #"{"code":"007","message":"bad sign","status":401}"#)
        #expect(try TelepatErrorResponse(parsing: bytes(error.json.compactRendered())) == error)
        let ok = TelepatResponse(status: 202, content: .string("Created"))
        #expect(try TelepatResponse(parsing: bytes(ok.json.compactRendered())) == ok)
        #expect(throws: TelepatProtocolError.self) { try TelepatResponse(parsing: bytes(error.json.compactRendered())) }
        for code in TelepatErrorCode.allCases {
            #expect(code.rawValue.count == 3 && code.rawValue.allSatisfy(\.isNumber))
            #expect((400..<600).contains(code.status))
        }
    }
}
