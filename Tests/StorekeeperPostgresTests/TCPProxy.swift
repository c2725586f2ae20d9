import NIOCore
import NIOPosix
import StorekeeperTesting
import Synchronization

/// A loopback TCP proxy to a server, that a test can cut (every connection closed, new ones refused) and restore on
/// the same port: a database outage without stopping the database the other tests share.
final class TCPProxy: Sendable {
    let targetHost: String
    let targetPort: Int
    private let state = Mutex<(listener: (any Channel)?, port: Int, connections: [any Channel])>((nil, 0, []))

    init(to host: String, port: Int) {
        targetHost = host
        targetPort = port
    }

    /// The port it listens on (0 before ``start()``).
    var port: Int { state.withLock { $0.port } }

    /// Listens (on a free port the first time, on the same port after a ``cut()``).
    func start() async throws {
        let proxy = self
        let listener = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.autoRead, value: false)
            .childChannelInitializer { inbound in
                ClientBootstrap(group: inbound.eventLoop).connect(host: proxy.targetHost, port: proxy.targetPort).flatMap { outbound in
                    proxy.state.withLock { $0.connections += [inbound, outbound] }
                    return inbound.pipeline.addHandler(Glue(partner: outbound)).flatMap {
                        outbound.pipeline.addHandler(Glue(partner: inbound))
                    }.map { inbound.read() }
                }
            }
            .bind(host: "127.0.0.1", port: port).get()
        state.withLock { state in
            state.listener = listener
            state.port = listener.localAddress?.port ?? 0
        }
    }

    /// Closes every connection and stops listening: connecting is refused until ``start()``.
    func cut() async {
        let (listener, connections) = state.withLock { state in
            defer {
                state.listener = nil
                state.connections = []
            }
            return (state.listener, state.connections)
        }
        try? await listener?.close()
        for connection in connections { try? await connection.close() }
    }

    /// Forwards what one side reads to the other; closing one closes the other.
    private final class Glue: ChannelInboundHandler, Sendable {
        typealias InboundIn = ByteBuffer
        let partner: any Channel

        init(partner: any Channel) { self.partner = partner }

        func channelActive(context: ChannelHandlerContext) {
            context.read()
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            let bytes = unwrapInboundIn(data)
            let eventLoop = context.eventLoop
            let channel = context.channel
            partner.writeAndFlush(bytes).whenComplete { _ in eventLoop.execute { channel.read() } }
        }

        func channelInactive(context: ChannelHandlerContext) {
            partner.close(promise: nil)
        }

        func errorCaught(context: ChannelHandlerContext, error: any Error) {
            context.close(promise: nil)
        }
    }
}
