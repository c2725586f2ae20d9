import AppStoreModels
package import AppStoreServerAPI
import Foundation
package import Logging
import ServiceLifecycle
package import StorekeeperCore
import Synchronization

/// At start, asks the App Store once per app and environment with App Store Server API credentials whether it accepts
/// them (`CredentialCheck`), so that a wrong key, key ID, issuer ID or bundle ID is found now and not at the first
/// recovery run (never, with recovery off). A refusal (401) is logged as an error and sets
/// `storekeeper_app_store_credentials_refused` to 1; an App Store that cannot be reached is a warning and stops
/// nothing (the webhook needs no credentials; recovery tries again at its next run). `/health` shows each outcome.
package final class CredentialCheckService: Service, Sendable {
    let clients: [VerifierKey: AppStoreServerAPIClient]
    let logger: Logger
    let metrics: StorekeeperMetrics
    private let outcomes = Mutex<[VerifierKey: CredentialCheck.Outcome]>([:])

    package init(clients: [VerifierKey: AppStoreServerAPIClient], logger: Logger, metrics: StorekeeperMetrics) {
        self.clients = clients
        self.logger = logger
        self.metrics = metrics
    }

    /// Each app and environment's outcome so far (`unchecked` until its call returns), for `/health`.
    package var summary: [String: String] {
        let known = outcomes.withLock { $0 }
        return Dictionary(uniqueKeysWithValues: clients.keys.map { ($0.description, known[$0]?.rawValue ?? "unchecked") })
    }

    package func run() async throws {
        // A shutdown while the App Store does not answer (the client retrying) ends the checks at once: they are
        // informative, and must not hold the server's stop.
        await cancelWhenGracefulShutdown {
            await withTaskGroup(of: Void.self) { group in
                for (app, client) in self.clients {
                    group.addTask { await self.check(app, client) }
                }
            }
        }
        // Stays until shutdown: a service that returns ends the application's service group.
        try? await gracefulShutdown()
    }

    func check(_ app: VerifierKey, _ client: AppStoreServerAPIClient) async {
        let result = await CredentialCheck.run(app, client: client)
        outcomes.withLock { $0[app] = result.outcome }
        let metadata: Logger.Metadata = [
            "app.bundle_id": .string(app.bundleId), "app.environment": .string(app.environment.rawValue), "detail": .string(result.detail),
        ]
        switch result.outcome {
        case .accepted:
            metrics.credentials(bundleId: app.bundleId, environment: app.environment.rawValue, refused: false)
            logger.info("App Store Server API credentials accepted", metadata: metadata)
        case .refused:
            metrics.credentials(bundleId: app.bundleId, environment: app.environment.rawValue, refused: true)
            logger.error(
                "App Store Server API credentials REFUSED by the App Store: notification recovery and reconciliation of this app cannot work until serverAPI is fixed",
                metadata: metadata
            )
        case .unreachable:
            logger.warning(
                "App Store Server API credentials not checked: the App Store could not be reached; recovery tries again at its next run",
                metadata: metadata)
        }
    }
}
