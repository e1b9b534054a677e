import ApptimistCrypto
import ApptimistProtocol
import Foundation
import Testing

/// The file notice's JSON document (Docs/apptimist-protocol.md, "File notices"), as the service
/// writes it and the mount reads it.
@Suite("Apptimist file notices")
struct FileNoticeTests {
    @Test func aWriteAndARemovalReadBackAsWritten() throws {
        let name: [UInt8] = Array("my file".utf8) + [0xFF]
        let written = try ApptimistFileNotice.written(name, contents: Array("hello".utf8))
        #expect(written.size == 5)
        #expect(written.sha512 == (try SHA512.digest(Array("hello".utf8))))
        let text = String(decoding: written.json(), as: UTF8.self)
        #expect(text.contains(#""file":"6d792066696c65ff""#) && text.contains(#""op":"write""#) && text.contains(#""size":5"#))
        #expect(ApptimistFileNotice(json: written.json()) == written)
        let removal = ApptimistFileNotice(file: name, operation: .remove)
        #expect(String(decoding: removal.json(), as: UTF8.self) == #"{"file":"6d792066696c65ff","op":"remove"}"#)
        #expect(ApptimistFileNotice(json: removal.json()) == removal)
    }

    @Test(arguments: [
        "", "[]", "{}", #"{"file":"","op":"write"}"#, #"{"file":"61","op":"rename"}"#, #"{"file":"zz","op":"remove"}"#,
        #"{"file":"61","op":"write","size":1}"#, #"{"file":"61","op":"write","size":1,"sha512":"00"}"#,
    ])
    func documentsThatAreNoNoticeAreRefused(text: String) {
        #expect(ApptimistFileNotice(json: Array(text.utf8)) == nil)
    }
}
