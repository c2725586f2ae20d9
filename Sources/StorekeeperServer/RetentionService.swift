import Foundation
import Logging
import ServiceLifecycle
import StorekeeperCore

/// Drops the raw signed payloads of notifications older than the configured number of days (their decoded facts
/// stay), at start and then every hour, until graceful shutdown.
struct RetentionService: Service {
    let store: any LedgerStore
    let rawPayloadDays: Double
    let logger: Logger
    var interval: Duration = .seconds(3_600)

    func run() async throws {
        await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                await prune()
                try? await Task.sleep(for: interval)
            }
        }
    }

    /// One pass; returns how many payloads were dropped.
    @discardableResult
    func prune(now: Date = Date()) async -> Int {
        let cutoff = now.addingTimeInterval(-rawPayloadDays * 86_400)
        do {
            let dropped = try await store.pruneRawPayloads(receivedBefore: cutoff)
            if dropped > 0 {
                logger.info(
                    "raw notification payloads past retention dropped",
                    metadata: ["retention.dropped": .stringConvertible(dropped), "retention.days": .stringConvertible(rawPayloadDays)]
                )
            }
            return dropped
        } catch {
            logger.error("retention pass failed; it runs again within the hour", metadata: ["error": .string(error.message)])
            return 0
        }
    }
}
