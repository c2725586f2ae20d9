import AppStoreModels
import Foundation
import Hummingbird
import HummingbirdAuth
import StorekeeperCore
import StorekeeperHTTP

extension CustomerAPI {
    /// `{"consented": true|false}`, read strictly.
    struct ConsentBody: Decodable { var consented: Bool }

    /// `PUT /v1/customers/{id}/consumption-consent[?bundleId=…&environment=…]` with `{"consented": true|false}`: what
    /// the customer answered in the app when asked whether their use of it may be shared with Apple if they ask for a
    /// refund. Without `true`, a `CONSUMPTION_REQUEST` about their purchases is never answered (Apple's rule).
    func consent(_ request: Request, customerId: String, identity: APIKeyIdentity) async throws -> Response {
        let query = try QueryParameters(request, allowed: ["environment", "bundleId"])
        let (bundleId, environment) = try scope(of: query, identity: identity)
        let buffer = try await StorekeeperApplication.readBody(request)
        let consented: Bool
        do {
            consented = try StrictJSONDecoder.decode(ConsentBody.self, from: Array(buffer.readableBytesView), file: "the body").consented
        } catch {
            throw APIError(
                .badRequest, .malformedBody,
                #"the body must be JSON {"consented": true} or {"consented": false}: "#
                    + UntrustedText.escaped(error.message, limit: StrictJSONDecoder.answerLimit))
        }
        let consent = ConsumptionConsent(consented: consented, at: now())
        // Only a customer the app knows (a purchase, or a token issued): a consent kept for an unknown ID could not be
        // erased with the customer.
        let known: Bool
        do {
            known = try await reader.store.customerExists(customerId, bundleId: bundleId, environment: environment)
        } catch {
            throw APIError(.serviceUnavailable, .storageUnavailable, "the ledger could not be read; retry")
        }
        guard known else {
            throw APIError(
                .notFound, .unknownCustomer,
                "no customer '\(customerId)' for \(bundleId) in \(environment): issue their app account token (POST /v1/customers/{id}/app-account-token) or submit a purchase first"
            )
        }
        do {
            try await reader.store.setConsumptionConsent(
                consent, for: CustomerKey(bundleId: bundleId, environment: environment, customerId: customerId))
        } catch {
            throw APIError(.serviceUnavailable, .storageUnavailable, "the consent could not be stored; retry")
        }
        struct Recorded: Encodable {
            var customerId: String
            var bundleId: String
            var environment: String
            var consented: Bool
            var at: Date
        }
        return StorekeeperApplication.jsonResponse(
            Recorded(customerId: customerId, bundleId: bundleId, environment: environment.rawValue, consented: consented, at: consent.at))
    }
}
