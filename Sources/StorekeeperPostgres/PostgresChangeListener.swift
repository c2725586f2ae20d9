import AppStoreModels
import Foundation
import Logging
import PostgresNIO
import StorekeeperCore
import Synchronization

/// Carries each instance's commits to the others' read caches: a write announces the customers it changed with
/// `pg_notify` inside its transaction (PostgreSQL delivers it at commit, and never for a rollback), and every
/// instance `LISTEN`s on one pooled connection and announces what it hears on its ``LedgerChangeFeed``.
///
/// While the listening connection is down the feed is marked incomplete (readers stop caching, and everything
/// cached is dropped); when it is back, everything is dropped once more, since commits made meanwhile were not heard.
/// A payload is the writer's instance ID and the customers as a JSON array; a set too large for PostgreSQL's
/// 8,000-byte payload is sent as `*` (everyone).
final class PostgresChangeListener: Sendable {
    let pool: PostgresPool
    let channel: String
    let feed: LedgerChangeFeed
    let logger: Logger
    /// This instance's ID in the payloads it sends (it ignores its own: they were announced at commit).
    let instance = UUID().uuidString
    private let task = Mutex<Task<Void, Never>?>(nil)

    init(pool: PostgresPool, channel: String, feed: LedgerChangeFeed, logger: Logger) {
        self.pool = pool
        self.channel = channel
        self.feed = feed
        self.logger = logger
    }

    /// Starts listening; returns once the first `LISTEN` is in place (or throws when it cannot be).
    func start() async throws {
        feed.setComplete(false)
        let (ready, continuation) = AsyncStream<Result<Void, any Error>>.makeStream()
        let listening = Task { [self] in
            var firstAttempt = true
            var delay = Duration.milliseconds(100)
            while !Task.isCancelled {
                do {
                    // The current client's, outside the pool's count: this connection is held for good.
                    try await pool.client.withConnection { connection in
                        try await connection.listen(on: self.channel) { notifications in
                            self.feed.setComplete(true)
                            if firstAttempt {
                                continuation.yield(.success(()))
                                firstAttempt = false
                            }
                            delay = .milliseconds(100)
                            for try await notification in notifications { self.received(notification.payload) }
                        }
                    }
                } catch {
                    if Task.isCancelled { break }
                    if firstAttempt {
                        continuation.yield(.failure(error))
                        return
                    }
                    logger.warning(
                        "lost the connection that hears other instances' writes; answers are not cached until it is back",
                        metadata: ["error": .string(PostgresLedgerStore.describe(error))]
                    )
                }
                feed.setComplete(false)
                try? await Task.sleep(for: delay)
                delay = min(delay * 2, .seconds(5))
            }
        }
        task.withLock { $0 = listening }
        for await result in ready {
            try result.get()
            return
        }
    }

    /// Stops listening without waiting.
    func cancel() {
        task.withLock { $0?.cancel() }
    }

    func stop() async {
        let listening = task.withLock { task in
            defer { task = nil }
            return task
        }
        listening?.cancel()
        await listening?.value
    }

    /// The payload that announces `customers` to the other instances (sent by the transaction's last statement,
    /// ``WriteStatement``, and delivered when it commits).
    func announcement(_ customers: Set<String>) -> String {
        var payload = instance + " "
        if let json = try? JSONEncoder().encode(customers.sorted()), json.count + payload.utf8.count < 7_900 {
            payload += String(decoding: json, as: UTF8.self)
        } else {
            payload += "*"
        }
        return payload
    }

    private func received(_ payload: String) {
        guard let space = payload.firstIndex(of: " ") else { return feed.publishEveryone() }
        guard payload[..<space] != instance else { return }
        let body = payload[payload.index(after: space)...]
        guard body != "*", let customers = try? JSONDecoder().decode([String].self, from: Data(body.utf8)) else {
            return feed.publishEveryone()
        }
        feed.publish(Set(customers))
    }
}
