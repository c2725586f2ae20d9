import AppStoreModels
import AppStoreServerAPI
import Foundation
package import Logging
import ServiceLifecycle
import Synchronization

/// Runs each app's ``NotificationRecovery`` at start and then every ``NotificationRecovery/Settings/interval``
/// (every failed delivery in the history at start and every ``NotificationRecovery/Settings/failuresInterval``),
/// until graceful shutdown. A failed run (Apple unreachable, the ledger down) is logged and tried again at the next
/// interval; the watermark only moves with a run that finished.
///
/// With several instances on one database, each app's job runs on the instance that holds its ``JobLease`` (the
/// only one calling Get Notification History for that app, so the instances never add up past Apple's rate limit);
/// another takes over within the lease's duration when that instance dies.
package struct NotificationRecoveryService: Service {
    let recoveries: [NotificationRecovery]
    let store: any LedgerStore
    let leaseDuration: Duration
    let logger: Logger

    package init(recoveries: [NotificationRecovery], store: any LedgerStore, leaseDuration: Duration = .seconds(60), logger: Logger) {
        self.recoveries = recoveries
        self.store = store
        self.leaseDuration = leaseDuration
        self.logger = logger
    }

    /// The lease name of an app's recovery job.
    package static func jobName(_ app: VerifierKey) -> String { "notification recovery \(app.bundleId) \(app.environment.rawValue)" }

    package func run() async throws {
        await cancelWhenGracefulShutdown {
            await withTaskGroup(of: Void.self) { group in
                for recovery in recoveries {
                    let lease = JobLease(store: store, job: Self.jobName(recovery.app), duration: leaseDuration)
                    let schedule = LeasedSchedule(lease: lease, interval: recovery.settings.interval, logger: logger)
                    let state = RunState()
                    group.addTask { await schedule.run { await Self.runOnce(recovery, state: state, logger: logger) } }
                }
            }
        }
    }

    /// When the last pass over every failed delivery began.
    package final class RunState: Sendable {
        let lastFailuresPass = Mutex<Date?>(nil)
        package init() {}
    }

    package static func runOnce(_ recovery: NotificationRecovery, state: RunState, logger: Logger) async {
        let app: Logger.Metadata = ["app.bundle_id": .string(recovery.app.bundleId), "app.environment": .string(recovery.app.environment.rawValue)]
        let started = recovery.now()
        let failures = state.lastFailuresPass.withLock { $0 }.map { started.timeIntervalSince($0) >= recovery.settings.failuresInterval } ?? true
        let metrics = recovery.metrics
        do {
            let report = try await recovery.run(failures: failures)
            if failures { state.lastFailuresPass.withLock { $0 = started } }
            let level: Logger.Level = report.applied + report.recorded + report.refused > 0 ? .info : .debug
            logger.log(
                level: level, "notification recovery run",
                metadata: app.merging([
                    "recovery.fetched": .stringConvertible(report.fetched), "recovery.applied": .stringConvertible(report.applied),
                    "recovery.recorded": .stringConvertible(report.recorded), "recovery.duplicates": .stringConvertible(report.duplicates),
                    "recovery.refused": .stringConvertible(report.refused), "recovery.failures_pass": .stringConvertible(failures),
                ]) { $1 })
            if let lost = report.uncovered, !report.complete {
                logger.error(
                    "\("notification recovery could not cover its window: the App Store's history no longer holds what it created then; ")\("notifications of that time that this server did not receive are lost (reconcile the customers to repair their purchases)")",
                    metadata: app.merging([
                        "recovery.uncovered_from": .string(lost.start.formatted(.iso8601)),
                        "recovery.uncovered_to": .string(lost.end.formatted(.iso8601)),
                    ]) { $1 }
                )
            }
            metrics.recoveryRunEnded(
                bundleId: recovery.app.bundleId, environment: recovery.app.environment.rawValue, outcome: report.complete ? "complete" : "incomplete")
        } catch {
            let cause = (error as? NotificationRecovery.Stopped)?.cause ?? error
            if cause is CancellationError || Task.isCancelled { return }
            metrics.recoveryRunEnded(bundleId: recovery.app.bundleId, environment: recovery.app.environment.rawValue, outcome: "failed")
            if let api = cause as? AppStoreServerAPIError, api.kind == .unauthorized {
                metrics.credentials(bundleId: recovery.app.bundleId, environment: recovery.app.environment.rawValue, refused: true)
                logger.error(
                    "notification recovery run failed: the App Store refused this app's App Store Server API credentials (HTTP 401); check the key ID, issuer ID, private key and bundle ID in serverAPI",
                    metadata: app
                )
                return
            }
            logger.error(
                "notification recovery run failed; it runs again at the next interval",
                metadata: app.merging([
                    "error": .string(UntrustedText.escaped(String(describing: cause), limit: 512))
                ]) { $1 })
        }
    }
}
