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
///
/// It also bounds a request's head (issue 38: an 80 KB-4 MB header or URL got no status line and
/// was closed only at the deadline, as the HTTP decoder's own overflow error went unanswered):
/// a request line longer than `maxRequestLineBytes` is answered 414, a head longer than
/// `maxHeadBytes` 431, at once, and the connection closed; the decoder never sees them.
///
/// Each deadline close or refused head is counted in `statistics`; the first of each reason is
/// logged at info, the rest only counted (a flood of stuck connections is not a flood of logs).
final class ConnectionActivity: ChannelDuplexHandler, @unchecked Sendable {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    typealias OutboundIn = IOData
    typealias OutboundOut = IOData

    private enum State { case idle, inRequest, webSocket }

    /// Longest request line (method, target, version) answered; a longer one gets 414.
    static let maxRequestLineBytes = 16 << 10
    /// Longest request head (request line and header fields) answered; a longer one gets 431.
    /// Below llhttp's own limit (80 KiB), so this answer always comes first.
    static let maxHeadBytes = 64 << 10
    /// How long a refused request's remaining bytes are read and dropped before the close.
    static let lingering = TimeAmount.seconds(2)

    private let requestTimeout: TimeAmount
    private let logger: Logger
    private let statistics: ServerStatistics
    private let lastInboundBox = NIOLockedValueBox(NIODeadline.now())
    private let closeReasonBox = NIOLockedValueBox<String?>(nil)
    // Event-loop confined.
    private var state = State.idle
    private var timer: Scheduled<Void>?
    private var head = HeadScan()
    /// Set once a 101 went out: the connection carries WebSocket frames from then on.
    private var upgraded = false
    /// Set at the first byte of the first request.
    private var requested = false

    /// Tells the connection cap this connection has logged in.
    private let onLoggedIn: @Sendable () -> Void

    init(requestTimeout: Duration, statistics: ServerStatistics, logger: Logger, onLoggedIn: @escaping @Sendable () -> Void = {}) {
        self.requestTimeout = TimeAmount(requestTimeout)
        self.statistics = statistics
        self.logger = logger
        self.onLoggedIn = onLoggedIn
    }

    /// `channel` has logged in (a Simperium `init`, an Apptimist LOGIN, a Telepat device bound
    /// on a WebSocket): it keeps its place when the connection cap is reached. (A Telepat long
    /// poll is a plain request: closed for room, its client polls again.)
    static func loggedIn(_ channel: any Channel) {
        channel.eventLoop.execute {
            (try? channel.pipeline.syncOperations.handler(type: ConnectionActivity.self))?.onLoggedIn()
        }
    }

    /// When bytes last arrived from the peer (any thread).
    var lastInbound: NIODeadline { lastInboundBox.withLockedValue { $0 } }

    /// Why this handler closed the connection (a deadline, a refused head); nil if it did not.
    var closeReason: String? { closeReasonBox.withLockedValue { $0 } }

    func handlerAdded(context: ChannelHandlerContext) {
        arm(context, reason: "no request")
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        timer?.cancel()
        timer = nil
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        lastInboundBox.withLockedValue { $0 = .now() }
        // Refused: nothing more is read.
        guard closeReason == nil else { return }
        if state == .idle {
            // The deadline of a request runs from its first byte: trickling it does not extend it.
            state = .inRequest
            requested = true
            head = HeadScan()
            arm(context, reason: "request not complete")
        }
        if state == .inRequest, !upgraded, !head.ended {
            switch head.scan(unwrapInboundIn(data).readableBytesView) {
            case .within: break
            case .requestLineTooLong: return refuse(context, status: "414 URI Too Long", reason: "request line too long")
            case .headTooLarge: return refuse(context, status: "431 Request Header Fields Too Large", reason: "request head too large")
            }
        }
        context.fireChannelRead(data)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if let replacement = statusLineOverride, case .byteBuffer(let buffer) = unwrapOutboundIn(data),
           let rewritten = Self.replacingStatusLine(of: buffer, with: replacement, allocator: context.channel.allocator) {
            statusLineOverride = nil
            return write(context: context, data: wrapOutboundOut(.byteBuffer(rewritten)), promise: promise)
        }
        if case .byteBuffer(let buffer) = unwrapOutboundIn(data), buffer.readableBytesView.starts(with: "HTTP/1.1 101 ".utf8) {
            // Switching protocols: what follows are WebSocket frames, not request heads.
            upgraded = true
        }
        if state == .inRequest {
            if upgraded {
                // No HTTP deadline from here: the WebSocket's own (its watchdog, or a Telepat
                // session's silence) take over once its handler runs. An idle deadline armed
                // here closed a socket whose handler a loaded machine started late.
                state = .webSocket
                timer?.cancel()
                timer = nil
            } else {
                // Answered (or answering): the connection may idle as long before the next request.
                state = .idle
                arm(context, reason: "idle")
            }
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

    /// A graceful shutdown began: closes the connection now if it never sent a request, rather
    /// than after the shutdown grace (issue 38). Hummingbird closes a keep-alive connection
    /// between two requests itself, and knows when an answer's body is all written (this
    /// handler sees its head only); a request under way, or a WebSocket, is left to finish.
    func shutdownBegan(_ channel: any Channel) {
        channel.eventLoop.execute {
            guard self.state == .idle, !self.requested, !self.upgraded else { return }
            self.timer?.cancel()
            self.timer = nil
            channel.close(promise: nil)
        }
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

    /// Answers `status` and closes: the request is not read further.
    private func refuse(_ context: ChannelHandlerContext, status: String, reason: String) {
        timer?.cancel()
        timer = nil
        closing(reason: reason, metadata: ["status": "\(status.prefix(3))"])
        var answer = context.channel.allocator.buffer(capacity: 128)
        answer.writeString("HTTP/1.1 \(status)\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        // Written below the HTTP encoder (this handler comes first): the decoder never saw the request.
        let boundContext = NIOLoopBound(context, eventLoop: context.eventLoop)
        context.writeAndFlush(wrapOutboundOut(.byteBuffer(answer))).whenComplete { _ in
            // A lingering close (RFC 9112 §9.6): the peer may still be sending its request, and
            // closing with its bytes unread would reset the connection, which can destroy the
            // answer before the peer reads it. So: end our side, drop what still comes (see
            // `channelRead`), and close once the peer does, or `lingering` later.
            let context = boundContext.value
            let halfClosed = context.eventLoop.makePromise(of: Void.self)
            halfClosed.futureResult.whenFailure { _ in boundContext.value.close(promise: nil) }
            context.close(mode: .output, promise: halfClosed)
            context.eventLoop.scheduleTask(in: Self.lingering) { boundContext.value.close(promise: nil) }
        }
    }

    /// Records why the connection is closed, counts it, and logs the first of each reason.
    private func closing(reason: String, metadata: Logger.Metadata) {
        closeReasonBox.withLockedValue { $0 = reason }
        if statistics.countClose(reason: reason) {
            logger.info("closing an HTTP connection; further closes for this reason are counted, not logged", metadata: metadata.merging(["reason": "\(reason)"]) { $1 })
        }
    }

    private func arm(_ context: ChannelHandlerContext, reason: String) {
        timer?.cancel()
        let boundContext = NIOLoopBound(context, eventLoop: context.eventLoop)
        let timeout = requestTimeout
        timer = context.eventLoop.scheduleTask(in: timeout) { [self] in
            closing(reason: reason, metadata: ["timeout_ms": "\(timeout.nanoseconds / 1_000_000)"])
            boundContext.value.close(promise: nil)
        }
    }
}

/// How far a request's head has come, byte by byte (an HTTP/1.1 head ends at an empty line).
private struct HeadScan {
    enum Verdict { case within, requestLineTooLong, headTooLarge }

    var bytes = 0
    var requestLineDone = false
    var ended = false
    /// The last four bytes seen, newest lowest.
    private var recent: UInt32 = 0

    mutating func scan(_ view: ByteBufferView) -> Verdict {
        for byte in view {
            bytes += 1
            recent = recent << 8 | UInt32(byte)
            if byte == UInt8(ascii: "\n") {
                requestLineDone = true
                // CRLF CRLF, or a bare LF LF (which llhttp also accepts).
                if recent == 0x0D0A_0D0A || recent & 0xFFFF == 0x0A0A {
                    ended = true
                    return .within
                }
            }
            if !requestLineDone, bytes > ConnectionActivity.maxRequestLineBytes { return .requestLineTooLong }
            if bytes > ConnectionActivity.maxHeadBytes { return .headTooLarge }
        }
        return .within
    }
}
