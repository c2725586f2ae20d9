import Foundation
import HTTPTypes
import Logging
import NIOCore
import NIOHTTPTypes

/// Deadlines for one HTTP/1.1 connection, so that no client can hold a connection (and its file descriptor) by being
/// slow: the request head must be complete within ``HTTPLimits/headerReadTimeout`` of the connection opening or of
/// the first byte of a following request (slow headers, "slowloris"), the body within
/// ``HTTPLimits/bodyReadTimeout`` of the head (a chunked body that never ends), and the response must have gone
/// out within ``HTTPLimits/responseTimeout`` of the request's end (a client that never reads). Idle keep-alive
/// connections are Hummingbird's `idleTimeout`, and the number of connections its `MaximumAvailableConnections`.
///
/// The rules are a pure state machine (every event returns what to do); two channel handlers feed it: one before the
/// HTTP decoder sees raw bytes, one after it sees request and response parts.
struct ConnectionDeadlines {
    enum Deadline: Equatable {
        case head, body, response
    }

    enum Action: Equatable {
        case none
        /// Arm the deadline (replacing any other).
        case arm(Deadline)
        /// Cancel the armed deadline.
        case disarm
        /// Answer 408 for a head not read in time, then close.
        case refuseSlowHead
        /// Tell the request's reader that the body did not arrive in time (it answers 408); arm the response deadline.
        case failSlowBody
        /// Close the connection once what was written is flushed.
        case close
    }

    /// Requests whose response has not ended, oldest first (HTTP/1.1 may pipeline), each with whether its body has
    /// been read to its end. Bodies arrive in order, so only the last can still be reading.
    private(set) var pending: [Bool] = []
    /// Bytes of a new request arrived (or the connection opened) and its head is not complete.
    private(set) var readingHead = false
    private(set) var armed: Deadline? = nil
    /// The response being written began before its request's body was read to its end: it says `Connection: close`,
    /// and the connection closes after it, even if the body ends meanwhile.
    private(set) var closingAfterResponse = false

    /// The connection opened: its first request's head is due.
    mutating func connected() -> Action {
        readingHead = true
        return arm(.head)
    }

    /// Raw bytes arrived: the start of a new request's head when nothing else is going on.
    mutating func bytesArrived() -> Action {
        guard pending.isEmpty, !readingHead else { return .none }
        readingHead = true
        return arm(.head)
    }

    mutating func headArrived() -> Action {
        readingHead = false
        pending.append(false)
        return arm(.body)
    }

    mutating func requestEnded() -> Action {
        guard let last = pending.indices.last, !pending[last] else { return .none }
        pending[last] = true
        return arm(.response)
    }

    /// The response's head is being written (for the oldest pending request): whether it must say
    /// `Connection: close`, its request's body not having been read to its end (a refusal, a route that reads none).
    mutating func responseBegan() -> Bool {
        if pending.first == false { closingAfterResponse = true }
        return closingAfterResponse
    }

    /// The response's last part was written (for the oldest pending request).
    mutating func responseEnded() -> Action {
        guard !pending.isEmpty else { return .none }
        guard pending.removeFirst(), !closingAfterResponse else {
            // Answered before its body was read to its end (a refusal): the rest is never read.
            pending.removeAll()
            armed = nil
            return .close
        }
        if pending.isEmpty {
            armed = nil
            return .disarm
        }
        return arm(pending.last == true ? .response : .body)
    }

    /// The armed deadline passed.
    mutating func deadlinePassed(_ deadline: Deadline) -> Action {
        guard armed == deadline else { return .none }
        armed = nil
        switch deadline {
        case .head where readingHead:
            return .refuseSlowHead
        case .body where pending.last == false:
            armed = .response
            return .failSlowBody
        case .response where !pending.isEmpty:
            return .close
        default:
            return .none
        }
    }

    private mutating func arm(_ deadline: Deadline) -> Action {
        armed = deadline
        return .arm(deadline)
    }
}

/// The error a request's body stream ends with when its body did not arrive within the body-read timeout.
struct BodyReadTimeout: Error, Sendable {
    var seconds: Double
}

/// Runs ``ConnectionDeadlines`` for one connection: ``rawBytesHandler`` goes first in the pipeline (before the HTTP
/// decoder), ``partsHandler`` after the decoder. Both live on the connection's event loop.
final class ConnectionGuard {
    let limits: HTTPLimits
    let logger: Logger
    private var deadlines = ConnectionDeadlines()
    private var scheduled: Scheduled<Void>? = nil
    /// The raw handler's context (writes a 408 below the HTTP encoder) and the parts handler's (fires the body error
    /// towards the request's reader).
    private var rawContext: ChannelHandlerContext? = nil
    private var partsContext: ChannelHandlerContext? = nil

    init(limits: HTTPLimits, logger: Logger) {
        self.limits = limits
        self.logger = logger
    }

    var rawBytesHandler: RawBytes { RawBytes(self) }
    var partsHandler: Parts { Parts(self) }

    fileprivate func run(_ action: ConnectionDeadlines.Action, on context: ChannelHandlerContext) {
        switch action {
        case .none:
            break
        case .arm(let deadline):
            scheduled?.cancel()
            let delay: Double =
                switch deadline {
                case .head: limits.headerReadTimeout
                case .body: limits.bodyReadTimeout
                case .response: limits.responseTimeout
                }
            let loop = context.eventLoop
            scheduled = loop.assumeIsolatedUnsafeUnchecked().scheduleTask(in: .nanoseconds(Int64(delay * 1e9))) { [self] in
                self.scheduled = nil
                self.run(self.deadlines.deadlinePassed(deadline), on: context)
            }
        case .disarm:
            scheduled?.cancel()
            scheduled = nil
        case .refuseSlowHead:
            logger.debug("connection closed: request head not complete in time", metadata: ["http.timeout_seconds": "\(limits.headerReadTimeout)"])
            guard let raw = rawContext else { return context.close(promise: nil) }
            let body =
                #"{"error":{"code":"header-timeout","message":"the request head was not complete within \#(limits.headerReadTimeout) seconds"}}"#
            let head =
                "HTTP/1.1 408 Request Timeout\r\nContent-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n"
            raw.writeAndFlush(NIOAny(ByteBuffer(string: head + body))).assumeIsolated().whenComplete { _ in raw.close(promise: nil) }
        case .failSlowBody:
            logger.debug("request body not complete in time", metadata: ["http.timeout_seconds": "\(limits.bodyReadTimeout)"])
            (partsContext ?? context).fireErrorCaught(BodyReadTimeout(seconds: limits.bodyReadTimeout))
            // If nobody reads the body to answer 408, the response deadline closes the connection.
            run(.arm(.response), on: context)
        case .close:
            scheduled?.cancel()
            scheduled = nil
            context.channel.close(promise: nil)
        }
    }

    fileprivate func stop() {
        scheduled?.cancel()
        scheduled = nil
        rawContext = nil
        partsContext = nil
    }

    /// Sees raw bytes, before the HTTP decoder.
    final class RawBytes: ChannelInboundHandler, RemovableChannelHandler {
        typealias InboundIn = ByteBuffer
        typealias InboundOut = ByteBuffer
        let owner: ConnectionGuard

        init(_ owner: ConnectionGuard) { self.owner = owner }

        func handlerAdded(context: ChannelHandlerContext) {
            owner.rawContext = context
            if context.channel.isActive { owner.run(owner.deadlines.connected(), on: context) }
        }

        func channelActive(context: ChannelHandlerContext) {
            if owner.deadlines.armed == nil { owner.run(owner.deadlines.connected(), on: context) }
            context.fireChannelActive()
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            owner.run(owner.deadlines.bytesArrived(), on: context)
            context.fireChannelRead(data)
        }

        func channelInactive(context: ChannelHandlerContext) {
            owner.stop()
            context.fireChannelInactive()
        }
    }

    /// Sees request and response parts, after the HTTP decoder.
    final class Parts: ChannelDuplexHandler, RemovableChannelHandler {
        typealias InboundIn = HTTPRequestPart
        typealias InboundOut = HTTPRequestPart
        typealias OutboundIn = HTTPResponsePart
        typealias OutboundOut = HTTPResponsePart
        let owner: ConnectionGuard

        init(_ owner: ConnectionGuard) { self.owner = owner }

        func handlerAdded(context: ChannelHandlerContext) { owner.partsContext = context }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            switch unwrapInboundIn(data) {
            case .head: owner.run(owner.deadlines.headArrived(), on: context)
            case .body: break
            case .end: owner.run(owner.deadlines.requestEnded(), on: context)
            }
            context.fireChannelRead(data)
        }

        func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
            if case .head(var head) = unwrapOutboundIn(data), owner.deadlines.responseBegan() {
                // The connection closes after this answer (its request's body is not read): the answer says so.
                head.headerFields[.connection] = "close"
                return context.write(wrapOutboundOut(.head(head)), promise: promise)
            }
            guard case .end = unwrapOutboundIn(data) else { return context.write(data, promise: promise) }
            let action = owner.deadlines.responseEnded()
            guard action == .close else {
                owner.run(action, on: context)
                return context.write(data, promise: promise)
            }
            // Answered before the request's body was read to its end: send the answer, then close.
            let written = context.eventLoop.makePromise(of: Void.self)
            written.futureResult.cascade(to: promise)
            written.futureResult.assumeIsolated().whenComplete { [owner] _ in owner.run(.close, on: context) }
            context.writeAndFlush(data, promise: written)
        }
    }
}
