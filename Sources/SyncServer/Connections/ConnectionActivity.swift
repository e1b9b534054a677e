import Logging
import NIOConcurrencyHelpers
import NIOCore

/// The first handler of every connection (after TLS): it gives each state a connection can
/// wait in a deadline (issue 20: idle, slowloris and never-ending requests were held forever).
///
/// - HTTP: a request must be answered within `requestTimeout` of its first byte, and an idle
///   connection (nothing since the last answer, or since accept) is closed after as long. A
///   peer trickling a header or never sending a promised body is closed then.
/// - WebSocket (after `enterWebSocket()`): no deadline here; the connection's watchdog uses
///   `lastInbound` (any bytes, pongs included) for its ping timeout.
final class ConnectionActivity: ChannelDuplexHandler, @unchecked Sendable {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    typealias OutboundIn = IOData
    typealias OutboundOut = IOData

    private enum State { case idle, inRequest, webSocket }

    private let requestTimeout: TimeAmount
    private let logger: Logger
    private let lastInboundBox = NIOLockedValueBox(NIODeadline.now())
    // Event-loop confined.
    private var state = State.idle
    private var timer: Scheduled<Void>?

    init(requestTimeout: Duration, logger: Logger) {
        self.requestTimeout = TimeAmount(requestTimeout)
        self.logger = logger
    }

    /// When bytes last arrived from the peer (any thread).
    var lastInbound: NIODeadline { lastInboundBox.withLockedValue { $0 } }

    func handlerAdded(context: ChannelHandlerContext) {
        arm(context, reason: "no request")
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        timer?.cancel()
        timer = nil
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        lastInboundBox.withLockedValue { $0 = .now() }
        if state == .idle {
            // The deadline of a request runs from its first byte: trickling it does not extend it.
            state = .inRequest
            arm(context, reason: "request not complete")
        }
        context.fireChannelRead(data)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if let replacement = statusLineOverride, case .byteBuffer(let buffer) = unwrapOutboundIn(data),
           let rewritten = Self.replacingStatusLine(of: buffer, with: replacement, allocator: context.channel.allocator) {
            statusLineOverride = nil
            return write(context: context, data: wrapOutboundOut(.byteBuffer(rewritten)), promise: promise)
        }
        if state == .inRequest {
            // Answered (or answering): the connection may idle as long before the next request.
            state = .idle
            arm(context, reason: "idle")
        }
        context.write(data, promise: promise)
    }

    /// The status line the next response goes out with instead of its own (event-loop confined).
    private var statusLineOverride: String?

    /// hummingbird-websocket answers every refused upgrade 400; one for an app id this server
    /// does not serve is a 404 (issue 20). Set before the refusal is written.
    func answerRefusedUpgradeWithNotFound(on eventLoop: any EventLoop) {
        eventLoop.execute { self.statusLineOverride = "HTTP/1.1 404 Not Found\r\n" }
    }

    /// The connection became a WebSocket: its watchdog keeps the deadlines from now on.
    func enterWebSocket(on eventLoop: any EventLoop) {
        eventLoop.execute {
            self.state = .webSocket
            self.timer?.cancel()
            self.timer = nil
        }
    }

    /// `buffer` with its first line (an HTTP/1.1 status line) replaced; nil if it has none.
    private static func replacingStatusLine(of buffer: ByteBuffer, with line: String, allocator: ByteBufferAllocator) -> ByteBuffer? {
        let view = buffer.readableBytesView
        guard view.starts(with: "HTTP/1.1 ".utf8),
              let end = view.firstIndex(of: UInt8(ascii: "\n")) else { return nil }
        var result = allocator.buffer(capacity: buffer.readableBytes + line.utf8.count)
        result.writeString(line)
        result.writeBytes(view[view.index(after: end)...])
        return result
    }

    private func arm(_ context: ChannelHandlerContext, reason: String) {
        timer?.cancel()
        let boundContext = NIOLoopBound(context, eventLoop: context.eventLoop)
        let logger = self.logger
        let timeout = requestTimeout
        timer = context.eventLoop.scheduleTask(in: timeout) {
            logger.debug("closing an HTTP connection past its deadline", metadata: [
                "reason": "\(reason)", "timeout_ms": "\(timeout.nanoseconds / 1_000_000)",
            ])
            boundContext.value.close(promise: nil)
        }
    }
}
