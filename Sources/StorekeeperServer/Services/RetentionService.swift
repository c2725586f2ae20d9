import Foundation
import Logging
import ServiceLifecycle
import StorekeeperCore

/// Drops the raw signed payloads of notifications older than the configured number of days (their decoded facts
/// stay), at start and then every hour, until graceful shutdown.
struct RetentionService: Service {
    let store: any LedgerStore
    let rawPayloadDays: Double
    var leaseDuration: Duration = .seconds(60)
    let logger: Logger
    var interval: Duration = .seconds(3_600)

    /// With several instances on one database, the one holding the job's lease prunes.
    func run() async throws {
        let schedule = LeasedSchedule(lease: JobLease(store: store, job: "retention", duration: leaseDuration), interval: interval, logger: logger)
        await cancelWhenGracefulShutdown {
            await schedule.run { await prune() }
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
