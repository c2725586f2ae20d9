import AppStoreModels
import Foundation
import Hummingbird
import HummingbirdAuth
import StorekeeperCore
import StorekeeperHTTP

extension SupportAPI {
    /// `GET /v1/support/overview[?bundleId=…][&environment=…][&days=1-365]`: an app's figures over the last `days`
    /// (30 by default; ``SupportOverview``), as the dashboard's overview shows them.
    func overview(_ request: Request, identity: APIKeyIdentity) async throws -> Response {
        let query = try QueryParameters(request, allowed: ["bundleId", "environment", "days"])
        let (bundleId, environment) = try CustomerAPI.scope(of: query, identity: identity, configuration.apps)
        let days = try query.int("days", in: 1...365) ?? 30
        let at = now()
        do {
            return StorekeeperApplication.jsonResponse(
                try await store.overview(
                    VerifierKey(bundleId: bundleId, environment: environment), since: at.addingTimeInterval(-Double(days) * 86_400), now: at))
        } catch {
            throw APIError(.serviceUnavailable, .storageUnavailable, "the ledger could not be read")
        }
    }
}
