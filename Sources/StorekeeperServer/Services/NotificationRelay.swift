import AsyncHTTPClient
import Foundation
package import Logging
import NIOCore
import NIOHTTP1
import ServiceLifecycle
package import StorekeeperCore
import Synchronization

/// Forwards every notification the server verified and stored, byte for byte, to another URL (the old backend during
/// a migration), as Apple would have sent it. Never in the way: the webhook hands the body over and answers Apple at
/// once; the relay sends from a bounded queue (the oldest dropped when it is full, counted), a few at a time, each with
/// retries and exponential backoff. What is in the queue is lost with the process: the old backend catches up through
/// its own means (Apple's notification history), as it would after any outage.
package final class NotificationRelay: Service, Sendable {
    package let settings: ServerConfiguration.RelaySettings
    let logger: Logger
    let metrics: StorekeeperMetrics
    private let stream: AsyncStream<[UInt8]>
    private let continuation: AsyncStream<[UInt8]>.Continuation
    /// Sends at once.
    static let concurrency = 4
    /// Marks a relayed request; the webhook never relays a request that carries it, so a relay pointed at itself (or
    /// two relaying to each other) forwards each notification once, not for ever.
    package static let relayedHeader = "Storekeeper-Relayed"

    package init(settings: ServerConfiguration.RelaySettings, logger: Logger, metrics: StorekeeperMetrics) {
        self.settings = settings
        self.logger = logger
        self.metrics = metrics
        (stream, continuation) = AsyncStream.makeStream(of: [UInt8].self, bufferingPolicy: .bufferingNewest(settings.queueCapacity))
    }

    /// Queues a verified notification's body; never waits.
    package func enqueue(_ body: [UInt8]) {
        if case .dropped = continuation.yield(body) {
            metrics.relay(outcome: "dropped")
            logger.warning("relay queue full: the oldest notification waiting was dropped", metadata: ["relay.capacity": "\(settings.queueCapacity)"])
        }
    }

    package func run() async throws {
        await withDiscardingTaskGroup { group in
            await withGracefulShutdownHandler {
                let slots = Slots(Self.concurrency)
                for await body in stream {
                    await slots.take()
                    group.addTask {
                        await self.send(body)
                        slots.give()
                    }
                }
            } onGracefulShutdown: {
                self.continuation.finish()
            }
        }
    }

    /// One notification, attempted up to ``ServerConfiguration/RelaySettings/maxAttempts`` times: a 2xx is done.
    func send(_ body: [UInt8]) async {
        var delay = 1.0
        for attempt in 1...settings.maxAttempts {
            var request = HTTPClientRequest(url: settings.url)
            request.method = .POST
            request.headers.add(name: "Content-Type", value: "application/json")
            request.headers.add(name: "User-Agent", value: "Storekeeper-Relay")
            // A Storekeeper that receives it (itself, by mistake, or one relaying back) does not relay it again.
            request.headers.add(name: Self.relayedHeader, value: "1")
            request.body = .bytes(ByteBuffer(bytes: body))
            var problem: String
            do {
                let response = try await HTTPClient.shared.execute(request, timeout: .milliseconds(Int64(settings.timeoutSeconds * 1_000)))
                // The answer is not read further than needed to reuse the connection.
                _ = try? await response.body.collect(upTo: 64 << 10)
                if (200..<300).contains(response.status.code) {
                    metrics.relay(outcome: "sent")
                    return
                }
                problem = "HTTP \(response.status.code)"
            } catch {
                problem = "\(type(of: error))"
            }
            if attempt == settings.maxAttempts || Task.isCancelled {
                metrics.relay(outcome: "failed")
                logger.warning(
                    "relay gave up on a notification", metadata: ["relay.attempts": "\(attempt)", "relay.error": .string(problem)])
                return
            }
            metrics.relay(outcome: "retried")
            try? await Task.sleep(for: .seconds(delay * Double.random(in: 0.8...1.2)))
            delay = min(delay * 2, 300)
        }
    }

    /// A counting semaphore for the sends in flight.
    final class Slots: Sendable {
        private let state: Mutex<(free: Int, waiting: [CheckedContinuation<Void, Never>])>

        init(_ count: Int) { state = Mutex((count, [])) }

        func take() async {
            await withCheckedContinuation { continuation in
                let ready = state.withLock { state -> Bool in
                    if state.free > 0 {
                        state.free -= 1
                        return true
                    }
                    state.waiting.append(continuation)
                    return false
                }
                if ready { continuation.resume() }
            }
        }

        func give() {
            let next = state.withLock { state -> CheckedContinuation<Void, Never>? in
                if state.waiting.isEmpty {
                    state.free += 1
                    return nil
                }
                return state.waiting.removeFirst()
            }
            next?.resume()
        }
    }
}
