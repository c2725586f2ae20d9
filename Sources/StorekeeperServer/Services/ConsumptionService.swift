import AppStoreServerAPI
import AppStoreSigning
import Foundation
import Logging
import ServiceLifecycle
import StorekeeperCore

/// The consumption-request job (``ConsumptionResponder``): every ``ServerConfiguration/JobSettings/consumptionCheckSeconds``,
/// on the instance holding its lease. The requests are claimed one by one in the ledger as well, so an instance that
/// lost the lease mid-pass never answers a request the new holder answers.
struct ConsumptionService: Service {
    let responder: ConsumptionResponder
    let interval: Duration
    let leaseDuration: Duration
    let logger: Logger
    let metrics: StorekeeperMetrics

    init(
        store: any LedgerStore, configuration: ServerConfiguration, verifiers: [VerifierKey: SignedDataVerifier],
        clients: [VerifierKey: AppStoreServerAPIClient], now: @escaping @Sendable () -> Date, logger: Logger, metrics: StorekeeperMetrics
    ) {
        responder = ConsumptionResponder(
            store: store, verifiers: verifiers, clients: clients,
            policies: Dictionary(configuration.apps.map { ($0.bundleId, $0.consumption) }) { first, _ in first },
            holder: JobLease.instanceName, now: now, budget: .seconds(30), logger: logger,
            outcome: { bundleId, outcome in metrics.consumptionRequest(bundleId: bundleId, outcome: outcome) })
        interval = .milliseconds(Int64(configuration.jobs.consumptionCheckSeconds * 1_000))
        leaseDuration = configuration.jobLeaseDuration
        self.logger = logger
        self.metrics = metrics
        // The series exist from the start (0), so that an alert on them sees a value, not "no data".
        for app in configuration.apps {
            for outcome in ["sent", "late", "failed"] { metrics.consumptionRequest(bundleId: app.bundleId, outcome: outcome, count: 0) }
        }
    }

    func run() async throws {
        let schedule = LeasedSchedule(
            lease: JobLease(store: responder.store, job: "consumption-requests", duration: leaseDuration), interval: interval, logger: logger)
        await cancelWhenGracefulShutdown {
            await schedule.run { await responder.pass() }
        }
    }
}
