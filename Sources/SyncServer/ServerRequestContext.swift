import Hummingbird
import HummingbirdWebSocket
import NIOConcurrencyHelpers
import NIOCore

/// The request context of the server's routes; it keeps the connection's NIO channel so that a
/// WebSocket whose client stops reading can be closed without waiting on its backpressure.
struct ServerRequestContext: RequestContext, WebSocketRequestContext {
    var coreContext: CoreRequestContextStorage
    let channel: any Channel
    private let webSocketSlot: NIOLockedValueBox<WebSocketHandlerReference<ServerRequestContext>?>

    /// hummingbird-websocket stores the upgrade handler, with this context in it, in this
    /// reference, which the context holds: a cycle that kept every WebSocket connection's
    /// context, logger metadata and (through `channel`) its NIO channel for good (issue 20:
    /// ~6 KiB per connection). The endpoint lets go of it once upgraded (`releaseWebSocket`).
    var webSocket: WebSocketHandlerReference<ServerRequestContext> {
        webSocketSlot.withLockedValue { $0 } ?? WebSocketHandlerReference()
    }

    init(source: ApplicationRequestContextSource) {
        self.coreContext = .init(source: source)
        self.webSocketSlot = NIOLockedValueBox(WebSocketHandlerReference())
        self.channel = source.channel
    }

    /// Breaks the cycle above: the upgrade handler has been read by now.
    func releaseWebSocket() {
        webSocketSlot.withLockedValue { $0 = nil }
    }
}
