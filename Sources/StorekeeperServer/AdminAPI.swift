import AppStoreModels
import Foundation
import Hummingbird
import HummingbirdAuth
import StorekeeperCore
import StorekeeperHTTP

/// Operations for admin keys only (an app key gets 403): `POST /v1/admin/customers/{id}/reconcile` compares one
/// customer with the App Store and repairs the ledger (``Reconciler``); `?dryRun=true` only reports,
/// `?bundleId=…&environment=…` pick the app when several have App Store Server API credentials.
struct AdminAPI: Sendable {
    let reconcilers: [VerifierKey: Reconciler]

    func addRoutes(to group: RouterGroup<StorekeeperRequestContext>) {
        group.post("/admin/customers/:customerId/reconcile") { request, context in
            guard try context.requireIdentity().bundleId == nil else {
                throw APIError(.forbidden, "admin-only", "this route takes an admin API key")
            }
            let customerId = try CustomerAPI.customerId(context)
            let reconciler = try pick(request)
            let dryRun = request.uri.queryParameters.get("dryRun").map { ["true", "1", "yes"].contains($0.lowercased()) } ?? false
            do {
                let report = try await reconciler.reconcile(.customer(customerId), dryRun: dryRun)
                return StorekeeperApplication.jsonResponse(report)
            } catch {
                throw APIError(
                    .badGateway, "reconcile-failed", "the App Store or the ledger could not be read: \(UntrustedText.escaped(String(describing: error), limit: 300))"
                )
            }
        }
    }

    /// The reconciler of the app and environment the query names (or the only one).
    func pick(_ request: Request) throws(APIError) -> Reconciler {
        let bundleId = request.uri.queryParameters.get("bundleId")
        let environment = request.uri.queryParameters.get("environment").map(AppStoreEnvironment.init(rawValue:))
        let matching = reconcilers.filter { (bundleId == nil || $0.key.bundleId == bundleId) && (environment == nil || $0.key.environment == environment) }
        guard !reconcilers.isEmpty else {
            throw APIError(.notFound, "no-credentials", "no app has App Store Server API credentials (serverAPI in the configuration)")
        }
        guard matching.count == 1, let reconciler = matching.first?.value else {
            let known = reconcilers.keys.map(\.description).sorted().joined(separator: ", ")
            throw APIError(
                .badRequest, "ambiguous-app",
                matching.isEmpty ? "no app with credentials matches; known: \(known)" : "give bundleId and environment; apps with credentials: \(known)"
            )
        }
        return reconciler
    }
}
