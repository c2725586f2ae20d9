import NIOCore
import NIOHTTP1

/// HTTP/1.0's connection rule, which NIO leaves to the application and the conversion to HTTP types drops (every
/// request reaches Hummingbird as HTTP/1.1): a request that does not ask for `Connection: keep-alive` is answered with
/// `Connection: close`, and its connection closes after the answer. Without it, a client that reads to the end of
/// the connection (`ab`, a load balancer's HTTP/1.0 health check) waited out the idle timeout. Placed between NIO's
/// decoder and the conversion; pipelined requests are answered in order, so each answer is its oldest request's.
final class HTTP10Close: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias InboundOut = HTTPServerRequestPart
    typealias OutboundIn = HTTPServerResponsePart
    typealias OutboundOut = HTTPServerResponsePart

    /// For each request read and not yet answered in full, in order: whether its connection closes after its answer.
    private var closing: CircularBuffer<Bool> = []

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if case .head(let head) = unwrapInboundIn(data) {
            closing.append(head.version.major == 1 && head.version.minor == 0 && !head.isKeepAlive)
        }
        context.fireChannelRead(data)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        switch unwrapOutboundIn(data) {
        case .head(var head) where closing.first == true:
            head.headers.replaceOrAdd(name: "connection", value: "close")
            context.write(wrapOutboundOut(.head(head)), promise: promise)
        case .end where closing.first != nil:
            guard closing.removeFirst() else { return context.write(data, promise: promise) }
            let written = context.eventLoop.makePromise(of: Void.self)
            written.futureResult.cascade(to: promise)
            written.futureResult.assumeIsolated().whenComplete { _ in context.close(promise: nil) }
            context.writeAndFlush(data, promise: written)
        default:
            context.write(data, promise: promise)
        }
    }
}
