import ChildProcesses
import Foundation
import Hummingbird
import Logging
import NIOSSL
import PostgresTestSupport
@testable import SyncServer
import Testing

@Suite(.timeLimit(.minutes(2)))
struct TLSTests {
    private static let openssl = "/usr/bin/openssl"

    /// Makes a self-signed certificate for localhost (SNI cannot carry an IP address) with the openssl tool.
    /// Off the cooperative pool: RSA key generation takes seconds of CPU on a busy machine.
    private func makeCertificate(in directory: TemporaryDirectory) async throws -> (cert: String, key: String) {
        try await offThePool { try Self.makeCertificateBlocking(in: directory) }
    }

    private static func makeCertificateBlocking(in directory: TemporaryDirectory) throws -> (cert: String, key: String) {
        let cert = directory.path + "/cert.pem"
        let key = directory.path + "/key.pem"
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: Self.openssl)
        process.arguments = [
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
            "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout", key, "-out", cert,
        ]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else { throw TestFailure("openssl failed") }
        return (cert, key)
    }

    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: openssl)))
    func serverSpeaksTLS() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let (cert, key) = try await makeCertificate(in: directory)
        let store = try ServerStore(directory: directory.path + "/data", passwordIterations: testPasswordIterations)
        let token = try await store.createUser(username: "tls-user", password: "pw").accessToken
        let portBox = PortBox()
        var configuration = ServerConfiguration(host: "127.0.0.1", port: 0)
        configuration.tls = .init(certificateChainPath: cert, privateKeyPath: key)
        configuration.onServerRunning = { port in portBox.set(port) }
        var logger = Logger(label: "tls-test")
        logger.logLevel = .warning
        let app = try buildServerApplication(configuration: configuration, store: store, logger: logger)
        let serverTask = Task { try await app.runService() }
        defer { serverTask.cancel() }

        let deadline = ContinuousClock.now + messageTimeout
        while portBox.value == nil, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(10)) }
        let port = try #require(portBox.value)

        var tls = TLSConfiguration.makeClientConfiguration()
        tls.trustRoots = .certificates(try NIOSSLCertificate.fromPEMFile(cert))
        let socket = try await TestSocket.connect(host: "localhost", port: port, appID: "test-app", tls: tls)
        #expect(try await socket.authorize(token: token) == "tls-user")
        #expect(try await socket.request("h:1") == "h:2")
        await socket.close()

        serverTask.cancel()
        _ = try? await serverTask.value
    }

    @Test func missingCertificateFilesAreAnError() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let store = try ServerStore(directory: directory.path, passwordIterations: testPasswordIterations)
        var configuration = ServerConfiguration(port: 0)
        configuration.tls = .init(certificateChainPath: directory.path + "/none.pem", privateKeyPath: directory.path + "/none.key")
        #expect(throws: (any Error).self) { _ = try buildServerApplication(configuration: configuration, store: store) }
    }
}

final class PortBox: @unchecked Sendable {
    private let lock = NSLock()
    private var port: Int?
    func set(_ value: Int) { lock.withLock { port = value } }
    var value: Int? { lock.withLock { port } }
}
