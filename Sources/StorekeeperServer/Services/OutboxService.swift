import Foundation
import Logging
import ServiceLifecycle
import StorekeeperCore

/// The outbox's jobs: the expiry job (customers whose access ends by time, with no notification, get their event
/// within ``ServerConfiguration/EventSettings/expiryCheckSeconds``) and the retention job (events past
/// ``ServerConfiguration/EventSettings/retentionDays`` are dropped, hourly), each run by the instance holding its
/// lease. Re-evaluating a customer is safe from any number of instances at once (the customer's state is locked and
/// an unchanged state emits nothing): the lease only saves the work.
struct OutboxService: Service {
    let store: any LedgerStore
    let settings: ServerConfiguration.EventSettings
    /// The configured webhook endpoints: retention keeps what they have not been handed yet.
    var endpoints: [String] = []
    var leaseDuration: Duration = .seconds(60)
    let logger: Logger
    let metrics: StorekeeperMetrics

    func run() async throws {
        // The series exists from the start (0), so that an alert on it sees a value, not "no data".
        metrics.expiryEvents(0)
        let expiry = LeasedSchedule(
            lease: JobLease(store: store, job: "event-expiry", duration: leaseDuration),
            interval: .milliseconds(Int64(settings.expiryCheckSeconds * 1_000)), logger: logger)
        let retention = LeasedSchedule(
            lease: JobLease(store: store, job: "event-retention", duration: leaseDuration), interval: .seconds(3_600), logger: logger)
        await cancelWhenGracefulShutdown {
            await withTaskGroup(of: Void.self) { group in
                group.addTask { await expiry.run { await expire() } }
                group.addTask { await retention.run { await prune() } }
            }
        }
    }

    /// One pass of the expiry job: every customer due now; returns how many events it emitted.
    @discardableResult
    func expire() async -> Int {
        var emitted = 0
        do {
            while !Task.isCancelled {
                let due = try await store.customersDue(at: store.outbox.now, limit: 200)
                guard !due.isEmpty else { break }
                for chunk in stride(from: 0, to: due.count, by: 20).map({ Array(due[$0..<min($0 + 20, due.count)]) }) {
                    emitted += try await store.reevaluate(chunk)
                }
                if due.count < 200 { break }
            }
        } catch {
            logger.error("expiry job pass failed; it runs again shortly", metadata: ["error": .string(error.message)])
        }
        if emitted > 0 {
            metrics.expiryEvents(emitted)
            logger.info("expiries by time emitted as events", metadata: ["events.emitted": .stringConvertible(emitted)])
        }
        return emitted
    }

    @discardableResult
    func prune() async -> Int {
        // By the machine's clock, which event IDs are made from (`occurredAt` is the server's clock, which tests and the
        // demo move).
        let cutoff = Date().addingTimeInterval(-settings.retentionDays * 86_400)
        do {
            let dropped = try await store.pruneEvents(occurredBefore: cutoff, keepingUnsentTo: endpoints)
            if dropped > 0 {
                logger.info(
                    "events past retention dropped",
                    metadata: ["events.dropped": .stringConvertible(dropped), "events.retention_days": .stringConvertible(settings.retentionDays)])
            }
            return dropped
        } catch {
            logger.error("event retention pass failed; it runs again within the hour", metadata: ["error": .string(error.message)])
            return 0
        }
    }
}
