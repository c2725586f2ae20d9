import AppStoreModels
import Foundation
public import Logging
public import ServiceLifecycle

/// Runs each app's ``NotificationRecovery`` at start and then every ``NotificationRecovery/Settings/interval``
/// (every failed delivery in the history at start and every ``NotificationRecovery/Settings/failuresInterval``),
/// until graceful shutdown. A failed run (Apple unreachable, the ledger down) is logged and tried again at the next
/// interval; the watermark only moves with a run that finished.
public struct NotificationRecoveryService: Service {
    let recoveries: [NotificationRecovery]
    let logger: Logger

    public init(recoveries: [NotificationRecovery], logger: Logger) {
        self.recoveries = recoveries
        self.logger = logger
    }

    public func run() async throws {
        await cancelWhenGracefulShutdown {
            await withTaskGroup(of: Void.self) { group in
                for recovery in recoveries {
                    group.addTask { await Self.loop(recovery, logger: logger) }
                }
            }
        }
    }

    static func loop(_ recovery: NotificationRecovery, logger: Logger) async {
        var lastFailuresPass: Date? = nil
        let app: Logger.Metadata = ["app.bundle_id": .string(recovery.app.bundleId), "app.environment": .string(recovery.app.environment.rawValue)]
        while !Task.isCancelled {
            let started = recovery.now()
            let failures = lastFailuresPass.map { started.timeIntervalSince($0) >= recovery.settings.failuresInterval } ?? true
            do {
                let report = try await recovery.run(failures: failures)
                if failures { lastFailuresPass = started }
                let level: Logger.Level = report.applied + report.recorded + report.refused > 0 ? .info : .debug
                logger.log(level: level, "notification recovery run", metadata: app.merging([
                    "recovery.fetched": .stringConvertible(report.fetched), "recovery.applied": .stringConvertible(report.applied),
                    "recovery.recorded": .stringConvertible(report.recorded), "recovery.duplicates": .stringConvertible(report.duplicates),
                    "recovery.refused": .stringConvertible(report.refused), "recovery.failures_pass": .stringConvertible(failures),
                ]) { $1 })
            } catch is CancellationError {
                return
            } catch {
                logger.error("notification recovery run failed; it runs again at the next interval", metadata: app.merging([
                    "error": .string(UntrustedText.escaped(String(describing: error), limit: 512)),
                ]) { $1 })
            }
            try? await Task.sleep(for: recovery.settings.interval)
        }
    }
}
