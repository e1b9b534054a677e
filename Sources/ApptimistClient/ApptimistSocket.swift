import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOWebSocket

/// A plain `ws://` WebSocket carrying binary messages, that tells which subprotocol the server
/// accepted (the version negotiation of Docs/apptimist-protocol.md needs the answer's
/// Sec-WebSocket-Protocol, which HummingbirdWSClient does not hand out).
struct ApptimistSocket {
    /// `ws://HOST[:PORT]/PATH?QUERY`, split.
    struct Address: Sendable, Hashable {
        let host: String
        let port: Int
        let path: String

        init(url: String) throws(ApptimistEngineError) {
            guard let components = URLComponents(string: url), components.scheme == "ws", let host = components.host, !host.isEmpty
            else { throw .configuration("an Apptimist --server is ws://HOST[:PORT]/SERVICE, not \(url)") }
            guard !components.path.isEmpty, components.path != "/" else {
                throw .configuration("an Apptimist --server names its service: ws://HOST[:PORT]/SERVICE")
            }
            self.host = host
            port = components.port ?? 80
            path = components.percentEncodedPath
        }
    }

    enum Upgrade {
        case websocket(NIOAsyncChannel<WebSocketFrame, WebSocketFrame>, accepted: String?)
        case refused
    }

    /// Opens the socket (query: the device's ephemeral key in hex), offering `subprotocols`;
    /// runs `body` with the accepted subprotocol, the binary messages received, and a writer.
    static func connect(
        _ address: Address, query: String, subprotocols: [String], maxMessageBytes: Int, timeout: Duration,
        body: @Sendable (_ accepted: String?, _ messages: AsyncThrowingStream<[UInt8], Error>, _ writer: ApptimistSocketWriter) async throws -> Void
    ) async throws {
        let upgrade: EventLoopFuture<Upgrade> = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connectTimeout(.nanoseconds(Int64(timeout.components.seconds) * 1_000_000_000 + timeout.components.attoseconds / 1_000_000_000))
            .connect(host: address.host, port: address.port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    let upgrader = NIOTypedWebSocketClientUpgrader<Upgrade>(
                        maxFrameSize: maxMessageBytes,
                        upgradePipelineHandler: { channel, head in
                            channel.eventLoop.makeCompletedFuture {
                                let socket = try NIOAsyncChannel<WebSocketFrame, WebSocketFrame>(wrappingChannelSynchronously: channel)
                                return Upgrade.websocket(socket, accepted: head.headers.first(name: "Sec-WebSocket-Protocol"))
                            }
                        })
                    var headers = HTTPHeaders()
                    headers.add(name: "Host", value: address.port == 80 ? address.host : "\(address.host):\(address.port)")
                    headers.add(name: "Sec-WebSocket-Protocol", value: subprotocols.joined(separator: ", "))
                    let request = HTTPRequestHead(version: .http1_1, method: .GET, uri: address.path + "?" + query, headers: headers)
                    let configuration = NIOTypedHTTPClientUpgradeConfiguration(
                        upgradeRequestHead: request, upgraders: [upgrader],
                        notUpgradingCompletionHandler: { channel in channel.eventLoop.makeCompletedFuture { Upgrade.refused } })
                    return try channel.pipeline.syncOperations.configureUpgradableHTTPClientPipeline(
                        configuration: .init(upgradeConfiguration: configuration))
                }
            }
        let result = try await withTimeout(timeout) { try await upgrade.get() }
        guard case .websocket(let socket, let accepted) = result else {
            throw ApptimistEngineError.connection("the server refused the WebSocket upgrade")
        }
        try await socket.executeThenClose { inbound, outbound in
            let writer = ApptimistSocketWriter(outbound: outbound)
            let (messages, input) = AsyncThrowingStream<[UInt8], Error>.makeStream()
            let reader = Task {
                var message: [UInt8] = []
                do {
                    for try await frame in inbound {
                        switch frame.opcode {
                        case .binary, .continuation:
                            var data = frame.unmaskedData
                            message += data.readBytes(length: data.readableBytes) ?? []
                            guard message.count <= maxMessageBytes else {
                                throw ApptimistEngineError.connection("a message larger than \(maxMessageBytes) bytes")
                            }
                            if frame.fin {
                                input.yield(message)
                                message = []
                            }
                        case .ping:
                            await writer.send(opcode: .pong, frame.unmaskedData)
                        case .connectionClose:
                            await writer.close()
                            input.finish()
                            return
                        default:
                            // Text frames have no place in this protocol.
                            throw ApptimistEngineError.connection("a WebSocket frame that is not binary (\(frame.opcode))")
                        }
                    }
                    input.finish()
                } catch {
                    input.finish(throwing: error)
                }
            }
            defer { reader.cancel() }
            try await body(accepted, messages, writer)
            await writer.close()
        }
    }

    private static func withTimeout<T: Sendable>(_ timeout: Duration, _ operation: @escaping @Sendable () async throws -> T) async throws -> T {
        try await withThrowingTaskGroup(of: T.self) { group in
            group.addTask { try await operation() }
            group.addTask {
                try await Task.sleep(for: timeout)
                throw ApptimistEngineError.connection("no WebSocket upgrade within \(timeout)")
            }
            defer { group.cancelAll() }
            guard let first = try await group.next() else { throw CancellationError() }
            return first
        }
    }
}

/// Writes binary messages on the socket (masked, as a client must); serialised by the actor.
actor ApptimistSocketWriter {
    private let outbound: NIOAsyncChannelOutboundWriter<WebSocketFrame>
    private var closed = false

    init(outbound: NIOAsyncChannelOutboundWriter<WebSocketFrame>) {
        self.outbound = outbound
    }

    func write(_ message: [UInt8]) async throws {
        guard !closed else { throw ApptimistEngineError.connection("the connection is closed") }
        let frame = WebSocketFrame(fin: true, opcode: .binary, maskKey: .random(), data: ByteBuffer(bytes: message))
        try await outbound.write(frame)
    }

    func send(opcode: WebSocketOpcode, _ data: ByteBuffer) async {
        guard !closed else { return }
        try? await outbound.write(WebSocketFrame(fin: true, opcode: opcode, maskKey: .random(), data: data))
    }

    /// A close frame, once; the transport closes when the connection's body returns.
    func close() async {
        guard !closed else { return }
        var code = ByteBuffer()
        code.write(webSocketErrorCode: .normalClosure)
        try? await outbound.write(WebSocketFrame(fin: true, opcode: .connectionClose, maskKey: .random(), data: code))
        closed = true
        outbound.finish()
    }
}
