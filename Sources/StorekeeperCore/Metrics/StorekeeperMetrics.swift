package import CoreMetrics
package import Foundation
import Synchronization

/// What Storekeeper counts and times, through swift-metrics with a factory given to it (never the global one): the
/// server exports its factory's registry with swift-prometheus at `GET /metrics`; tests and tools make their own.
///
/// Every label set is small and fixed: notification types are Apple's (verified) or `unverified`, error codes are
/// ours, routes are patterns, never IDs.
package struct StorekeeperMetrics: Sendable {
    package let factory: any MetricsFactory
    /// The metrics made so far, by name and labels: making one through the factory validates its name and labels
    /// every time, which cost more than the rest of a cached read.
    let handles = Handles()

    package init(factory: any MetricsFactory) {
        self.factory = factory
    }

    final class Handles: Sendable {
        let counters = Mutex<[[String]: Counter]>([:])
        let timers = Mutex<[[String]: CoreMetrics.Timer]>([:])
        let gauges = Mutex<[[String]: Gauge]>([:])
    }

    private func key(_ label: String, _ dimensions: [(String, String)]) -> [String] {
        [label] + dimensions.flatMap { [$0.0, $0.1] }
    }

    private func counter(_ label: String, _ dimensions: [(String, String)]) -> Counter {
        let key = key(label, dimensions)
        if let counter = handles.counters.withLock({ $0[key] }) { return counter }
        let counter = Counter(label: label, dimensions: dimensions, factory: factory)
        return handles.counters.withLock { made in
            if let existing = made[key] { return existing }
            made[key] = counter
            return counter
        }
    }

    private func timer(_ label: String, _ dimensions: [(String, String)]) -> CoreMetrics.Timer {
        let key = key(label, dimensions)
        if let timer = handles.timers.withLock({ $0[key] }) { return timer }
        let timer = CoreMetrics.Timer(label: label, dimensions: dimensions, factory: factory)
        return handles.timers.withLock { made in
            if let existing = made[key] { return existing }
            made[key] = timer
            return timer
        }
    }

    private func gauge(_ label: String, _ dimensions: [(String, String)]) -> Gauge {
        let key = key(label, dimensions)
        if let gauge = handles.gauges.withLock({ $0[key] }) { return gauge }
        let gauge = Gauge(label: label, dimensions: dimensions, factory: factory)
        return handles.gauges.withLock { made in
            if let existing = made[key] { return existing }
            made[key] = gauge
            return gauge
        }
    }

    /// Metrics that go nowhere, for tools and tests that read none.
    package static var discarded: StorekeeperMetrics { StorekeeperMetrics(factory: NOOPMetricsHandler.instance) }

    /// The metrics' names and help texts (an exporter that can show help uses these).
    package enum Name {
        package static let notifications = "storekeeper_notifications_total"
        package static let relay = "storekeeper_relay_notifications_total"
        package static let verificationFailures = "storekeeper_verification_failures_total"
        package static let customerCache = "storekeeper_customer_cache_requests_total"
        package static let requestDuration = "storekeeper_http_request_duration_seconds"
        package static let recovered = "storekeeper_recovery_notifications_total"
        package static let recoveryLastSuccess = "storekeeper_recovery_last_success_timestamp_seconds"
        package static let recoveryLag = "storekeeper_recovery_lag_seconds"
        package static let databaseBatches = "storekeeper_database_batches_total"
        package static let databaseBatchedRequests = "storekeeper_database_batched_requests_total"
        package static let databaseRetries = "storekeeper_database_retries_total"
        package static let recoveryRuns = "storekeeper_recovery_runs_total"
        package static let credentialsRefused = "storekeeper_app_store_credentials_refused"
        package static let webhookAttempts = "storekeeper_webhook_attempts_total"
        package static let webhookBacklog = "storekeeper_webhook_backlog"
        package static let webhookOldest = "storekeeper_webhook_oldest_undelivered_seconds"
        package static let webhookDeadLetters = "storekeeper_webhook_dead_letters"
        package static let events = "storekeeper_events_total"
        package static let consumptionRequests = "storekeeper_consumption_requests_total"

        package static let help: [String: String] = [
            webhookAttempts: "Webhook delivery attempts, by endpoint and outcome (delivered, failed: tried again later, dead_lettered).",
            webhookBacklog: "Webhook deliveries waiting, by endpoint.",
            webhookOldest: "Age of the oldest webhook delivery waiting, by endpoint (seconds; 0 when none waits).",
            webhookDeadLetters: "Webhook deliveries dead-lettered and not redelivered, by endpoint.",
            events: "Events the expiry job emitted (expiries nobody announced).",
            consumptionRequests:
                "CONSUMPTION_REQUESTs by app and outcome: sent (answered in time), late (12 hours passed unanswered), failed (refused by the App Store, or undecidable), manual (left to a person), not-consented, no-answer.",
            notifications: "App Store Server Notifications received, by type and outcome.",
            verificationFailures: "Signed data refused by the verifier, by error code.",
            customerCache: "Customer reads answered from the cache (hit) or the ledger (miss).",
            requestDuration: "Time from request to response, by route, method and status.",
            recovered: "Notifications fetched from Get Notification History by the recovery job, by app, environment and outcome.",
            recoveryLastSuccess: "When the recovery job last finished a run without error, by app and environment (UNIX seconds).",
            recoveryLag: "How far behind the recovery job's watermark is, by app and environment (seconds).",
            databaseBatches:
                "PostgreSQL: batches run, by kind (notifications: transactions of live notifications; customer_reads: statements of customer reads for answers; a batch run again one by one after a failure counts once).",
            databaseBatchedRequests: "PostgreSQL: requests in those batches, by kind (divided by the batches: the mean batch size).",
            databaseRetries: "PostgreSQL: writes run again after a transient failure (deadlock, serialization failure, lost connection).",
            recoveryRuns:
                "Recovery runs, by app, environment and outcome (complete; incomplete: part of its window is no longer in the App Store's history; failed).",
            credentialsRefused:
                "1 when the App Store refused the app's App Store Server API credentials (HTTP 401) at its last authenticated call, 0 when it accepted them, by app and environment.",
        ]
    }

    /// A notification received (by the webhook or the recovery job): its verified type, or `unverified`, and the
    /// outcome (`applied`, `duplicate`, `recorded`, `rejected`, `storage_failure`).
    package func notification(type: String, outcome: String) {
        counter(Name.notifications, [("type", type), ("outcome", outcome)]).increment()
    }

    /// Signed data the verifier refused, by its error code.
    package func verificationFailure(code: String) {
        counter(Name.verificationFailures, [("code", code)]).increment()
    }

    /// A customer read answered from the cache or not.
    package func customerCache(hit: Bool) {
        counter(Name.customerCache, [("result", hit ? "hit" : "miss")]).increment()
    }

    /// How long one request took, by route pattern.
    package func request(route: String, method: String, status: Int, duration: Duration) {
        timer(Name.requestDuration, [("route", route), ("method", method), ("status", String(status))]).recordNanoseconds(duration.nanoseconds)
    }

    /// Notifications the recovery job fetched for one app and environment, by outcome.
    package func recovered(bundleId: String, environment: String, outcome: String, count: Int = 1) {
        guard count > 0 else { return }
        counter(Name.recovered, [("bundle_id", bundleId), ("environment", environment), ("outcome", outcome)]).increment(by: count)
    }

    /// A batch of `size` requests run as one (`Batcher`): `kind` is `notifications` or `customer_reads`.
    package func batch(kind: String, size: Int) {
        counter(Name.databaseBatches, [("kind", kind)]).increment()
        counter(Name.databaseBatchedRequests, [("kind", kind)]).increment(by: size)
    }

    /// A write run again after a transient failure.
    package func databaseRetry() {
        counter(Name.databaseRetries, []).increment()
    }

    /// A recovery run that ended, by outcome: `complete`, `incomplete` (part of the window it had to read is no longer in
    /// the App Store's history) or `failed` (an error; it runs again at the next interval).
    package func recoveryRunEnded(bundleId: String, environment: String, outcome: String) {
        counter(Name.recoveryRuns, [("bundle_id", bundleId), ("environment", environment), ("outcome", outcome)]).increment()
    }

    /// What the App Store said of an app's credentials at an authenticated call: refused (401) or accepted.
    package func credentials(bundleId: String, environment: String, refused: Bool) {
        gauge(Name.credentialsRefused, [("bundle_id", bundleId), ("environment", environment)]).record(refused ? 1 : 0)
    }

    /// A relayed notification: `sent`, `retried` (an attempt failed, another follows), `failed` (given up) or
    /// `dropped` (the queue was full).
    package func relay(outcome: String) {
        counter(Name.relay, [("outcome", outcome)]).increment()
    }

    /// One webhook delivery attempt, by what came of it (`delivered`, `failed`, `dead_lettered`).
    package func webhookAttempt(endpoint: String, outcome: String) {
        counter(Name.webhookAttempts, [("endpoint", endpoint), ("outcome", outcome)]).increment()
    }

    package func webhookStanding(endpoint: String, backlog: Int, oldestSeconds: Double, deadLetters: Int) {
        gauge(Name.webhookBacklog, [("endpoint", endpoint)]).record(backlog)
        gauge(Name.webhookOldest, [("endpoint", endpoint)]).record(oldestSeconds)
        gauge(Name.webhookDeadLetters, [("endpoint", endpoint)]).record(deadLetters)
    }

    /// A consumption request reached `outcome` (``ConsumptionRequestRecord/State``'s raw value).
    package func consumptionRequest(bundleId: String, outcome: String, count: Int = 1) {
        counter(Name.consumptionRequests, [("bundle_id", bundleId), ("outcome", outcome)]).increment(by: count)
    }

    package func expiryEvents(_ count: Int) {
        counter(Name.events, [("source", "expiry_job")]).increment(by: count)
    }

    package func recoveryRun(bundleId: String, environment: String, finishedAt: Date, lagSeconds: Double) {
        let dimensions = [("bundle_id", bundleId), ("environment", environment)]
        gauge(Name.recoveryLastSuccess, dimensions).record(finishedAt.timeIntervalSince1970)
        gauge(Name.recoveryLag, dimensions).record(lagSeconds)
    }
}

extension Duration {
    /// Whole nanoseconds (saturating).
    var nanoseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds.multipliedReportingOverflow(by: 1_000_000_000).overflow
            ? .max : seconds * 1_000_000_000 + attoseconds / 1_000_000_000
    }
}
