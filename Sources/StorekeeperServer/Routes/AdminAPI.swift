import AppStoreModels
import Foundation
import Hummingbird
import HummingbirdAuth
import StorekeeperCore
import StorekeeperHTTP

/// Operations for admin keys only (an app key gets 403): `POST /v1/admin/customers/{id}/reconcile` compares one
/// customer with the App Store and repairs the ledger (``Reconciler``); `?dryRun=true` only reports,
/// `?bundleId=…&environment=…` pick the app when several have App Store Server API credentials. Any other query
/// parameter, and any value but `true` or `false` for `dryRun`, is refused with 400; a customer the app has no data
/// for gets 404.
struct AdminAPI: Sendable {
    let reconcilers: [VerifierKey: Reconciler]
    /// Every configured app's bundle ID, to tell an app without credentials from one not configured.
    let apps: [String]

    func addRoutes(to group: RouterGroup<StorekeeperRequestContext>) {
        group.post("/admin/customers/:customerId/reconcile") { request, context in
            guard try context.requireIdentity().isAdmin else {
                throw APIError(.forbidden, .adminOnly, "this route takes an admin API key")
            }
            let customerId = try CustomerAPI.customerId(context)
            let query = try QueryParameters(request, allowed: ["dryRun", "bundleId", "environment"])
            // The query's own mistakes first: a bad `dryRun` is named whatever the app's.
            let dryRun = try query.bool("dryRun") ?? false
            let reconciler = try pick(query)
            do {
                let report = try await reconciler.reconcile(.customer(customerId), dryRun: dryRun)
                return StorekeeperApplication.jsonResponse(report)
            } catch is Reconciler.UnknownCustomer {
                throw APIError(
                    .notFound, .unknownCustomer, "no customer '\(customerId)' for \(reconciler.app.bundleId) in \(reconciler.app.environment)")
            } catch let error as StorageError {
                throw APIError(
                    .serviceUnavailable, .storageUnavailable, "the ledger could not be read: \(UntrustedText.escaped(error.message, limit: 300))")
            } catch let stopped as Reconciler.Stopped {
                throw APIError(
                    .badGateway, .reconcileFailed,
                    "the App Store or the ledger could not be read after \(stopped.report.checked) of \(stopped.report.purchases) purchases "
                        + "(\(stopped.report.recordsChanged) records repaired): \(UntrustedText.escaped(String(describing: stopped.cause), limit: 300))"
                )
            }
        }
    }

    /// The reconciler of the app and environment the query names (or the only one).
    func pick(_ query: QueryParameters) throws(APIError) -> Reconciler {
        let bundleId = query.string("bundleId")
        let environment = try query.environment()
        let matching = reconcilers.filter {
            (bundleId == nil || $0.key.bundleId == bundleId) && (environment == nil || $0.key.environment == environment)
        }
        guard !reconcilers.isEmpty else {
            throw APIError(.notFound, .noCredentials, "no app has App Store Server API credentials (serverAPI in the configuration)")
        }
        if matching.isEmpty, let bundleId, apps.contains(bundleId) {
            throw APIError(
                .notFound, .noCredentials,
                "app \(UntrustedText.quoted(bundleId, limit: 128))\(environment.map { " (\($0.rawValue))" } ?? "") has no App Store Server API credentials (serverAPI in the configuration)"
            )
        }
        let known = reconcilers.keys.map(\.description).sorted().joined(separator: ", ")
        guard !matching.isEmpty else {
            // An app or environment this server does not serve, as the customer routes say it.
            throw APIError(.badRequest, .unknownApp, "no app with credentials matches; apps with credentials: \(known)")
        }
        guard matching.count == 1, let reconciler = matching.first?.value else {
            throw APIError(.badRequest, .ambiguousApp, "give bundleId and environment; apps with credentials: \(known)")
        }
        return reconciler
    }
}
