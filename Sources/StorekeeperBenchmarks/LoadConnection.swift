import NIOCore
import NIOHTTP1
import NIOPosix

/// One keep-alive HTTP/1.1 connection that a benchmark worker drives, one request at a time; answers are reduced to
/// their status (bodies are read and dropped). It is deliberately lighter than a pooled HTTP client: on a 2-core
/// machine the load generator shares the CPU with the server it measures, and every cycle it spends is one the
/// server does not get.
final class LoadConnection: Sendable {
    private let channel: any Channel
    private let host: String

    private init(channel: any Channel, host: String) {
        self.channel = channel
        self.host = host
    }

    /// Connects to `host:port` on the shared event loop group.
    static func connect(host: String, port: Int) async throws -> LoadConnection {
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .channelOption(.tcpOption(.tcp_nodelay), value: 1)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHTTPClientHandlers()
                    try channel.pipeline.syncOperations.addHandler(ExchangeHandler())
                }
            }
            .connect(host: host, port: port).get()
        return LoadConnection(channel: channel, host: host)
    }

    /// Sends a request and waits for the whole answer; returns its status code.
    func send(_ method: HTTPMethod, _ path: String, headers: [(String, String)] = [], body: ByteBuffer? = nil) async throws -> UInt {
        var head = HTTPRequestHead(version: .http1_1, method: method, uri: path)
        head.headers.add(name: "Host", value: host)
        for (name, value) in headers { head.headers.add(name: name, value: value) }
        if let body { head.headers.add(name: "Content-Length", value: String(body.readableBytes)) }
        let promise = channel.eventLoop.makePromise(of: UInt.self)
        channel.writeAndFlush(Exchange(head: head, body: body, answer: promise), promise: nil)
        return try await promise.futureResult.get()
    }

    func close() async {
        try? await channel.close()
    }

    /// A request and where its answer goes.
    struct Exchange: Sendable {
        var head: HTTPRequestHead
        var body: ByteBuffer?
        var answer: EventLoopPromise<UInt>
    }

    struct ConnectionClosed: Error {}

    /// Turns exchanges into request parts and completes them, in order, with the status of each answer.
    final class ExchangeHandler: ChannelDuplexHandler {
        typealias InboundIn = HTTPClientResponsePart
        typealias OutboundIn = Exchange
        typealias OutboundOut = HTTPClientRequestPart

        private var waiting = CircularBuffer<EventLoopPromise<UInt>>()
        private var status: UInt = 0

        func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
            let exchange = unwrapOutboundIn(data)
            waiting.append(exchange.answer)
            context.write(wrapOutboundOut(.head(exchange.head)), promise: nil)
            if let body = exchange.body { context.write(wrapOutboundOut(.body(.byteBuffer(body))), promise: nil) }
            context.write(wrapOutboundOut(.end(nil)), promise: promise)
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            switch unwrapInboundIn(data) {
            case .head(let head): status = head.status.code
            case .body: break
            case .end: if !waiting.isEmpty { waiting.removeFirst().succeed(status) }
            }
        }

        func errorCaught(context: ChannelHandlerContext, error: any Error) {
            failAll(error)
            context.close(promise: nil)
        }

        func channelInactive(context: ChannelHandlerContext) {
            failAll(ConnectionClosed())
            context.fireChannelInactive()
        }

        private func failAll(_ error: any Error) {
            while !waiting.isEmpty { waiting.removeFirst().fail(error) }
        }
    }
}
