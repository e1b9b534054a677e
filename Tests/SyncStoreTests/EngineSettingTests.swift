import Foundation
import Testing
import SyncStore

@Suite("engine settings", .timeLimit(.minutes(1)))
struct EngineSettingTests {
    @Test func aSettingIsKeptAcrossReopenAndReplaced() throws {
        let directory = try TemporaryDirectory()
        defer { directory.cleanup() }
        do {
            let store = try SyncStore(path: directory.storePath)
            #expect(try store.engineSetting("telepat.device") == nil)
            try store.setEngineSetting("telepat.device", to: "first")
            try store.setEngineSetting("telepat.device", to: "second")
            try store.setEngineSetting("other", to: "x")
            try store.close()
        }
        let reopened = try SyncStore(path: directory.storePath)
        #expect(try reopened.engineSetting("telepat.device") == "second")
        #expect(try reopened.engineSetting("other") == "x")
        try reopened.close()
    }
}
