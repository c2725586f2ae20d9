import NIOCore
import NIOHTTP1

/// HTTP/1.0's connection rule, which NIO leaves to the application and the conversion to HTTP types drops (every
/// request reaches Hummingbird as HTTP/1.1): a request that does not ask for `Connection: keep-alive` is answered with
/// `Connection: close`, and its connection closes after the answer; one that asks is answered with
/// `Connection: keep-alive`. Without it, a client that reads to the end of
/// the connection (`ab`, a load balancer's HTTP/1.0 health check) waited out the idle timeout. Placed between NIO's
/// decoder and the conversion; pipelined requests are answered in order, so each answer is its oldest request's.
final class HTTP10Close: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias InboundOut = HTTPServerRequestPart
    typealias OutboundIn = HTTPServerResponsePart
    typealias OutboundOut = HTTPServerResponsePart

    /// What an HTTP/1.0 request's answer says of its connection.
    private enum Rule {
        /// Not HTTP/1.0: left to Hummingbird.
        case modern
        /// HTTP/1.0 asking for keep-alive: the answer says `Connection: keep-alive` (an HTTP/1.0 client assumes the
        /// connection closes unless told).
        case keptAlive
        /// HTTP/1.0 without: the answer says `Connection: close`, and the connection closes after it.
        case closing
    }

    /// For each request read and not yet answered in full, in order, its rule.
    private var rules: CircularBuffer<Rule> = []

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if case .head(let head) = unwrapInboundIn(data) {
            let old = head.version.major == 1 && head.version.minor == 0
            rules.append(!old ? .modern : head.isKeepAlive ? .keptAlive : .closing)
        }
        context.fireChannelRead(data)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        switch unwrapOutboundIn(data) {
        case .head(var head) where rules.first == .closing || rules.first == .keptAlive:
            // An answer that closes anyway (an early refusal) says so whatever the request asked.
            let closes = rules.first == .closing || head.headers["connection"].contains { $0.lowercased() == "close" }
            head.headers.replaceOrAdd(name: "connection", value: closes ? "close" : "keep-alive")
            context.write(wrapOutboundOut(.head(head)), promise: promise)
        case .end where !rules.isEmpty:
            guard rules.removeFirst() == .closing else { return context.write(data, promise: promise) }
            let written = context.eventLoop.makePromise(of: Void.self)
            written.futureResult.cascade(to: promise)
            written.futureResult.assumeIsolated().whenComplete { _ in context.close(promise: nil) }
            context.writeAndFlush(data, promise: written)
        default:
            context.write(data, promise: promise)
        }
    }
}
