import Hummingbird
import HummingbirdWebSocket
import NIOCore

/// The request context of the server's routes; it keeps the connection's NIO channel so that a
/// WebSocket whose client stops reading can be closed without waiting on its backpressure.
struct ServerRequestContext: RequestContext, WebSocketRequestContext {
    var coreContext: CoreRequestContextStorage
    let webSocket: WebSocketHandlerReference<ServerRequestContext>
    let channel: any Channel

    init(source: ApplicationRequestContextSource) {
        self.coreContext = .init(source: source)
        self.webSocket = .init()
        self.channel = source.channel
    }
}
