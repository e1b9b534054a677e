import ApptimistCrypto
import ChildProcesses
import Foundation
import Testing

/// PyNaCl (libsodium's Python binding, an implementation this module shares no code with) opens
/// and verifies what this module sealed and signed, produces the same bytes from the same inputs,
/// and seals and signs a reply that this module opens and verifies.
@Suite("Apptimist crypto: PyNaCl interoperates")
struct PyNaClInteropTests {
    static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Peers/nacl_peer.py").path

    @Test(.timeLimit(.minutes(1)))
    func eachSideOpensAndVerifiesTheOthers() async throws {
        let swiftBox = try BoxKeyPair.generate()
        let peerBox = try BoxKeyPair.generate()
        let swiftSign = try SigningKeyPair.generate()
        let peerSign = try SigningKeyPair.generate()
        let nonce = try CryptoBox.randomNonce()
        let replyNonce = try CryptoBox.randomNonce()
        let message = Array("from Swift to PyNaCl: ünïcode and \u{0} bytes".utf8) + (0 ... 255).map { UInt8($0) }
        let reply = Array("from PyNaCl to Swift".utf8)
        let sealed = try CryptoBox.seal(message, nonce: nonce, recipientPublicKey: peerBox.publicKey, senderSecretKey: swiftBox.secretKey)
        let signature = try Ed25519.sign(message, secretKey: swiftSign.secretKey)

        let answer = try await Self.runPeer([
            "swift_box_secret": swiftBox.secretKey.hex, "peer_box_secret": peerBox.secretKey.hex,
            "swift_sign_seed": swiftSign.seed.hex, "peer_sign_seed": peerSign.seed.hex,
            "nonce": nonce.hex, "message": message.hex, "swift_sealed": sealed.hex, "swift_signature": signature.hex,
            "reply": reply.hex, "reply_nonce": replyNonce.hex,
        ])
        #expect(answer["swift_box_public"] as? String == swiftBox.publicKey.hex)
        #expect(answer["peer_box_public"] as? String == peerBox.publicKey.hex)
        #expect(answer["swift_sign_public"] as? String == swiftSign.publicKey.hex)
        #expect(answer["peer_sign_public"] as? String == peerSign.publicKey.hex)
        #expect(answer["opened"] as? String == message.hex)
        #expect(answer["same_sealed"] as? String == sealed.hex)
        #expect(answer["tampered_box_opened"] as? Bool == false)
        #expect(answer["signature_verified"] as? Bool == true)
        #expect(answer["same_signature"] as? String == signature.hex)

        let replySealed = try [UInt8](hex: answer["reply_sealed"] as? String ?? "")
        let replySignature = try [UInt8](hex: answer["reply_signature"] as? String ?? "")
        let opened = try CryptoBox.open(replySealed, nonce: replyNonce, senderPublicKey: peerBox.publicKey, recipientSecretKey: swiftBox.secretKey)
        #expect(opened == reply)
        try Ed25519.verify(replySignature, of: reply, publicKey: peerSign.publicKey)
        #expect(throws: ApptimistCryptoError.signatureRejected) {
            try Ed25519.verify(replySignature, of: reply + [0], publicKey: peerSign.publicKey)
        }
    }

    /// A box sealed with a precomputed key (how ApptimistChannel seals) is what PyNaCl seals
    /// from the same keys and nonce, and PyNaCl opens it.
    @Test(.timeLimit(.minutes(1)))
    func pyNaClOpensABoxSealedWithAPrecomputedKey() async throws {
        let swiftBox = try BoxKeyPair.generate()
        let peerBox = try BoxKeyPair.generate()
        let swiftSign = try SigningKeyPair.generate()
        let peerSign = try SigningKeyPair.generate()
        let nonce = try CryptoBox.randomNonce()
        let replyNonce = try CryptoBox.randomNonce()
        let message = Array("sealed after crypto_box_beforenm".utf8) + (0 ... 255).map { UInt8($0) }
        let reply = Array("and back".utf8)
        let shared = try CryptoBox.sharedKey(publicKey: peerBox.publicKey, secretKey: swiftBox.secretKey)
        let sealed = try CryptoBox.seal(message, nonce: nonce, shared: shared)
        let answer = try await Self.runPeer([
            "swift_box_secret": swiftBox.secretKey.hex, "peer_box_secret": peerBox.secretKey.hex,
            "swift_sign_seed": swiftSign.seed.hex, "peer_sign_seed": peerSign.seed.hex,
            "nonce": nonce.hex, "message": message.hex, "swift_sealed": sealed.hex,
            "swift_signature": try Ed25519.sign(message, secretKey: swiftSign.secretKey).hex,
            "reply": reply.hex, "reply_nonce": replyNonce.hex,
        ])
        #expect(answer["opened"] as? String == message.hex)
        #expect(answer["same_sealed"] as? String == sealed.hex)
        let replySealed = try [UInt8](hex: answer["reply_sealed"] as? String ?? "")
        #expect(try CryptoBox.open(replySealed, nonce: replyNonce, shared: shared) == reply)
    }

    /// Runs the script with one JSON request on stdin (files, so no pipe can fill up), waits at
    /// most 30 s for it to end (the script's own alarm ends it after 40 s), and parses its answer.
    static func runPeer(_ request: [String: String]) async throws -> [String: Any] {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("nacl-peer-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let input = directory.appendingPathComponent("request.json")
        let output = directory.appendingPathComponent("answer.json")
        let errors = directory.appendingPathComponent("stderr.txt")
        try JSONSerialization.data(withJSONObject: request).write(to: input)
        try Data().write(to: output)
        try Data().write(to: errors)

        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", script, "40"]
        process.standardInput = try FileHandle(forReadingFrom: input)
        process.standardOutput = try FileHandle(forWritingTo: output)
        process.standardError = try FileHandle(forWritingTo: errors)
        try process.run()
        let deadline = ContinuousClock.now + .seconds(30)
        while process.isRunning, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
        if process.isRunning {
            process.terminate()
            process.waitUntilExit()
            throw TestFailure("the PyNaCl peer did not answer within 30 s")
        }
        let stderr = String(decoding: (try? Data(contentsOf: errors)) ?? Data(), as: UTF8.self)
        guard process.terminationStatus == 0 else {
            throw TestFailure("the PyNaCl peer exited with \(process.terminationStatus) (is PyNaCl installed? scripts/bootstrap): \(stderr)")
        }
        guard let answer = try JSONSerialization.jsonObject(with: Data(contentsOf: output)) as? [String: Any] else {
            throw TestFailure("the PyNaCl peer's answer is not a JSON object; stderr: \(stderr)")
        }
        return answer
    }
}
