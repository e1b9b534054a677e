import Testing
@testable import SyncProtocol

@Suite struct ValidationTests {
    @Test func entityKeys() throws {
        for key in ["a", "note.1", "user@example.com", "a%2Fb", "A-Z_0.9", String(repeating: "k", count: 256)] {
            #expect(EntityKey.isValid(key), "\(key)")
            try EntityKey.validate(key)
        }
        for key in ["", "a b", "a/b", "a:b", "ä", "a\nb", "a+b", String(repeating: "k", count: 257)] {
            #expect(!EntityKey.isValid(key), "\(key)")
            #expect(throws: ProtocolError.self) { try EntityKey.validate(key) }
        }
    }

    @Test func bucketNames() throws {
        for name in ["notes", "my-bucket_1.2", "a%20b", String(repeating: "b", count: 64)] {
            #expect(BucketName.isValid(name), "\(name)")
        }
        for name in ["", "a@b", "a b", "a/b", String(repeating: "b", count: 65)] {
            #expect(!BucketName.isValid(name), "\(name)")
        }
        #expect(throws: ProtocolError.invalidBucketName("a@b")) { try BucketName.validate("a@b") }
    }

    @Test func changeIDs() {
        #expect(ChangeID.isValid("3a5cbd2f0a71fca4933fff5a54d22b60"))
        #expect(ChangeID.isValid("6F9619FF-8B86-D011-B42D-00CF4FC964FF"))
        #expect(!ChangeID.isValid(""))
        #expect(!ChangeID.isValid("a b"))
        #expect(!ChangeID.isValid("a\u{7F}"))
        #expect(!ChangeID.isValid("é"))
        #expect(!ChangeID.isValid(String(repeating: "a", count: 65)))
        #expect(throws: ProtocolError.invalidChangeID("a b")) { try ChangeID.validate("a b") }
    }

    @Test func tokens() throws {
        #expect(AccessToken.isWellFormed(String(repeating: "a1", count: 16)))
        #expect(!AccessToken.isWellFormed(String(repeating: "a", count: 31)))
        #expect(!AccessToken.isWellFormed(String(repeating: "a", count: 31) + "-"))
        #expect(!AccessToken.isWellFormed("abc123"))
        #expect(!AccessToken.isWellFormed(String(repeating: "a", count: 513)))
        #expect(throws: ProtocolError.malformedToken) { try AccessToken.validate("short") }
    }

    @Test func usernamesMustNotLookLikeJSON() {
        #expect(Username.isValid("ender@example.com"))
        #expect(Username.isValid("trueish"))
        for name in ["", "123", "true", "null", "\"x\"", "{}", "[1]", "a\nb", " 7 "] {
            #expect(!Username.isValid(name), "\(name)")
        }
    }

    @Test func changeVersions() {
        #expect(ChangeVersion.isValid("511aa58737a401031d57db90"))
        #expect(!ChangeVersion.isValid(""))
        #expect(!ChangeVersion.isValid("a b"))
    }

    @Test func errorCodes() {
        #expect(ChangeErrorCode.allCases.map(\.rawValue) == [400, 401, 404, 405, 409, 412, 413, 440, 500])
        #expect(ChangeErrorCode(code: 503) == .internalError)
        #expect(ChangeErrorCode(code: 402) == nil)
        #expect(ChangeErrorCode.invalidDiff.description.hasPrefix("440"))
        for code in ChangeErrorCode.allCases { #expect(ChangeErrorCode(code: code.rawValue) == code) }
    }
}
