import NIOCore
import NIOWebSocket

/// RFC 6455 §5.1: "a server MUST close the connection upon receiving a frame that is not
/// masked", with 1002 (§7.4.1, protocol error). NIO's decoder and the WebSocket library accept
/// unmasked frames (issue 20: one was answered), so this handler sits right after the decoder.
final class MaskedFramesOnly: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = WebSocketFrame
    typealias InboundOut = WebSocketFrame
    typealias OutboundOut = WebSocketFrame

    private var failed = false

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !failed else { return }
        guard unwrapInboundIn(data).maskKey != nil else {
            failed = true
            var code = context.channel.allocator.buffer(capacity: 2)
            code.write(webSocketErrorCode: .protocolError)
            context.writeAndFlush(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .connectionClose, data: code)), promise: nil)
            context.close(promise: nil)
            return
        }
        context.fireChannelRead(data)
    }

    /// Puts the check right after the WebSocket frame decoder of `channel` (once upgraded).
    static func install(on channel: any Channel) async throws {
        try await channel.eventLoop.submit {
            let decoder = try channel.pipeline.syncOperations.context(handlerType: ByteToMessageHandler<WebSocketFrameDecoder>.self)
            try channel.pipeline.syncOperations.addHandler(MaskedFramesOnly(), position: .after(decoder.handler))
        }.get()
    }
}
