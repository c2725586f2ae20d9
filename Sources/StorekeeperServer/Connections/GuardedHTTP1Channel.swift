import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import NIOHTTPTypesHTTP1

/// Hummingbird's HTTP/1.1 child channel with a ``ConnectionGuard`` around its HTTP decoder: the guard's raw-bytes
/// handler first in the pipeline, its parts handler between the decoder and Hummingbird's connection-state handler;
/// and HTTP/1.0's connection rule (``HTTP10Close``) before the conversion to HTTP types.
struct GuardedHTTP1Channel: ServerChildChannel {
    typealias Value = HTTP1Channel.Value
    let http1: HTTP1Channel
    let limits: HTTPLimits

    init(responder: @escaping HTTPChannelHandler.Responder, limits: HTTPLimits) {
        self.http1 = HTTP1Channel(responder: responder, configuration: .init(idleTimeout: .nanoseconds(Int64(limits.idleTimeout * 1e9))))
        self.limits = limits
    }

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        let limits = self.limits
        let http1 = self.http1
        return channel.eventLoop.makeCompletedFuture { () throws -> NIOLoopBound<ConnectionGuard> in
            let connectionGuard = ConnectionGuard(limits: limits, logger: logger)
            try channel.pipeline.syncOperations.addHandler(connectionGuard.rawBytesHandler)
            return NIOLoopBound(connectionGuard, eventLoop: channel.eventLoop)
        }.flatMap { connectionGuard in
            http1.setup(channel: channel, logger: logger).flatMapThrowing { value in
                let operations = channel.pipeline.syncOperations
                let state = try operations.handler(type: HTTPConnectionStateHandler.self)
                try operations.addHandler(connectionGuard.value.partsHandler, position: .before(state))
                try operations.addHandler(HTTP10Close(), position: .before(try operations.handler(type: HTTP1ToHTTPServerCodec.self)))
                return value
            }
        }
    }

    func handle(value: Value, logger: Logger) async {
        await http1.handle(value: value, logger: logger)
    }
}

extension HTTPServerBuilder {
    /// HTTP/1.1 with Storekeeper's timeouts (``HTTPLimits``).
    static func guardedHTTP1(limits: HTTPLimits) -> HTTPServerBuilder {
        .init { responder in GuardedHTTP1Channel(responder: responder, limits: limits) }
    }
}
