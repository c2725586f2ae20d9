import AppStoreModels
import AppStoreSigning
import Foundation
import Hummingbird
import HummingbirdAuth
import Logging
import StorekeeperCore
import StorekeeperHTTP

/// Subscription offers signed by the server, for the app to pass to StoreKit:
/// - `POST /v1/customers/{id}/offers/{offerId}/signature?format=v1|v2` with `{"productId"[, "transactionId"]}`: the
///   offer policy (`OfferPolicy`) judges the customer's ledger; allowed, V1 answers the fields StoreKit takes (key ID,
///   a nonce the server issues, lowercase, the timestamp, the signature as base64 and as bytes, and the customer's
///   app account token, which the purchase must carry), V2 the `promotional-offer` JWS.
/// - `POST /v1/customers/{id}/introductory-offer-eligibility` with `{"productId"}`: the
///   `introductory-offer-eligibility` JWS, with the ledger's answer (has this customer had an introductory offer in the
///   product's group?).
///
/// Every signature and refusal is an audit record (`sign-offer`, `sign-introductory-offer-eligibility`) with the
/// key's name, the nonce and the decision. Apps without `offers` in the configuration: 404 `offers-not-configured`.
struct OfferAPI: Sendable {
    let configuration: ServerConfiguration
    let keys: [String: AppStoreAPIKey]
    let store: any LedgerStore
    let now: @Sendable () -> Date

    struct SignatureBody: Decodable {
        var productId: String
        var transactionId: String?
    }

    struct EligibilityBody: Decodable { var productId: String }

    func addRoutes(to group: RouterGroup<StorekeeperRequestContext>) {
        group.post("/customers/:customerId/offers/:offerId/signature") { request, context in
            try await sign(request, context, customerId: try CustomerAPI.customerId(context), identity: try context.requireIdentity())
        }
        group.post("/customers/:customerId/introductory-offer-eligibility") { request, context in
            try await eligibility(request, customerId: try CustomerAPI.customerId(context), identity: try context.requireIdentity())
        }
    }

    /// A product or offer identifier (a path's percent-decoded, as customer IDs are): 1-256 printable characters, no
    /// spaces, no invisible characters (U+2063 is the V1 payload's separator).
    static func identifier(_ value: String, _ name: String) throws(APIError) -> String {
        guard OfferPolicy.isIdentifier(value) else {
            throw APIError(
                .badRequest, .invalidParameter,
                "\(name) \(UntrustedText.quoted(value, limit: 64)) is not an identifier: 1-256 printable characters, no spaces or invisible characters"
            )
        }
        return value
    }

    /// The app's key, policy and scope for a request, and the customer's facts for the product.
    func context(
        _ query: QueryParameters, identity: APIKeyIdentity, customerId: String, productId: String, offerId: String?
    ) async throws -> (key: AppStoreAPIKey, policy: OfferPolicy, scope: CustomerKey, facts: OfferPolicy.Facts) {
        let (bundleId, environment) = try CustomerAPI.writeScope(of: query, identity: identity, configuration.apps)
        guard let key = keys[bundleId], let settings = configuration.apps.first(where: { $0.bundleId == bundleId })?.offers else {
            throw APIError(
                .notFound, .offersNotConfigured, "app '\(bundleId)' signs no offers: give it \"offers\" (a key and a policy) in the configuration")
        }
        guard environment != .xcode else {
            throw APIError(
                .badRequest, .unknownEnvironment, "offers are signed for Production and Sandbox; Xcode's StoreKit configuration signs its own")
        }
        let ledger: Ledger
        do {
            ledger = try await store.ledger(for: customerId, bundleId: bundleId, environment: environment)
        } catch {
            throw APIError(.serviceUnavailable, .storageUnavailable, "the ledger could not be read")
        }
        let policy = settings.policy
        let facts = policy.facts(ledger: ledger, customerId: customerId, bundleId: bundleId, productId: productId, offerId: offerId, now: now())
        return (key, policy, CustomerKey(bundleId: bundleId, environment: environment, customerId: customerId), facts)
    }

    func sign(_ request: Request, _ routeContext: StorekeeperRequestContext, customerId: String, identity: APIKeyIdentity) async throws -> Response {
        let query = try QueryParameters(request, allowed: ["format", "bundleId", "environment"])
        let format = query.string("format") ?? "v1"
        guard ["v1", "v2"].contains(format) else {
            throw APIError(.badRequest, .invalidParameter, "format must be v1 or v2, not \(UntrustedText.quoted(format, limit: 16))")
        }
        let rawOffer = routeContext.parameters.get("offerId") ?? ""
        let offerId = try Self.identifier(
            rawOffer.utf8.contains(UInt8(ascii: "%")) ? rawOffer.removingPercentEncoding ?? rawOffer : rawOffer, "the offer ID")
        let body: SignatureBody = try await Self.body(request, #"{"productId": "…"[, "transactionId": "…"]}"#)
        let productId = try Self.identifier(body.productId, "productId")
        if let id = body.transactionId, id.isEmpty || id.utf8.count > 20 || !id.utf8.allSatisfy({ (48...57).contains($0) }) {
            throw APIError(.badRequest, .malformedBody, "transactionId must be digits, not \(UntrustedText.quoted(id, limit: 32))")
        }
        var (key, policy, scope, facts) = try await context(query, identity: identity, customerId: customerId, productId: productId, offerId: offerId)
        try Self.requireGrouped(productId, policy: policy, facts: facts, what: "offers")
        let at = now()
        if let id = body.transactionId, !facts.transactionIds.contains(id) {
            throw APIError(
                .badRequest, .invalidParameter,
                "transactionId \(id) is not one of customer '\(customerId)''s transactions in \(scope.bundleId) (\(scope.environment.rawValue))")
        }
        // A signature issued, still valid (24 hours), and not yet redeemed as far as the ledger knows, counts for a
        // once-per-customer offer: two signatures asked before redeeming either must not give two redemptions.
        do {
            facts.outstandingSignature = try await store.supportActions(customer: scope).last { action in
                action.action == SupportAction.Kind.signOffer.rawValue && action.target == offerId && action.outcome == "done"
                    && at.timeIntervalSince(action.at) < 24 * 3_600
            }?.at
        } catch {
            throw APIError(.serviceUnavailable, .storageUnavailable, "the audit log could not be read")
        }
        var request: [String: JSONValue] = ["productId": .string(productId), "format": .string(format)]
        if let id = body.transactionId { request["transactionId"] = .string(id) }
        func action(_ outcome: String, _ detail: [String: JSONValue]) -> SupportAction {
            SupportAction(
                at: at, keyName: identity.name, customer: scope, action: SupportAction.Kind.signOffer.rawValue, target: offerId, request: request,
                outcome: outcome, detail: detail)
        }
        func refuse(_ code: String, _ reason: String) async throws -> Never {
            await auditRefusal(action("refused", ["refused": .string(code), "reason": .string(reason)]), logger: routeContext.logger)
            throw APIError(.forbidden, .init(rawValue: code), reason)
        }
        /// Records the signature about to be given, or refuses it: no signature leaves without its audit record (a log
        /// that cannot be written answers 503). When the policy allowed it only because no signature is outstanding (a
        /// once-per-customer offer), the record is a claim: of two requests racing, on any instances, one signs.
        func record(_ detail: [String: JSONValue]) async throws {
            var claimed = facts
            claimed.outstandingSignature = at
            let needsClaim: Bool
            if case .refused = policy.decide(offerId: offerId, productId: productId, environment: scope.environment, facts: claimed) {
                needsClaim = true
            } else {
                needsClaim = false
            }
            do {
                if needsClaim {
                    if case .alreadyDone(let issued) = try await store.recordSupportAction(
                        action("done", detail), unlessDoneSince: at.addingTimeInterval(-24 * 3_600))
                    {
                        var raced = facts
                        raced.outstandingSignature = issued
                        if case .refused(let code, let reason) = policy.decide(
                            offerId: offerId, productId: productId, environment: scope.environment, facts: raced)
                        {
                            try await refuse(code, reason)
                        }
                    }
                } else {
                    _ = try await store.recordSupportAction(action("done", detail))
                }
            } catch let error as StorageError {
                routeContext.logger.error(
                    "an offer signature could not be written to the audit log; none was given",
                    metadata: ["error": .string(UntrustedText.escaped(error.message, limit: 300))])
                throw Self.unaudited
            }
        }
        switch policy.decide(offerId: offerId, productId: productId, environment: scope.environment, facts: facts) {
        case .refused(let code, let reason):
            try await refuse(code, reason)
        case .allowed(let rule):
            if format == "v2" {
                let jws = try OfferSignatures.promotionalOfferJWS(
                    key: key, productId: productId, offerIdentifier: offerId, transactionId: body.transactionId, at: at)
                try await record(["rule": .string("rules[\(rule)]")])
                struct V2: Encodable {
                    var format = "v2"
                    var productId: String
                    var offerId: String
                    var signedOffer: String
                }
                return StorekeeperApplication.jsonResponse(V2(productId: productId, offerId: offerId, signedOffer: jws))
            }
            let token: LowercaseUUID
            do {
                token = try await store.appAccountToken(for: customerId, bundleId: scope.bundleId, environment: scope.environment, renew: false)
            } catch {
                throw APIError(.serviceUnavailable, .storageUnavailable, "the customer's app account token could not be issued; retry")
            }
            let v1 = try OfferSignatures.signV1(key: key, productId: productId, offerId: offerId, appAccountToken: token.description, at: at)
            try await record(["rule": .string("rules[\(rule)]"), "nonce": .string(v1.nonce), "timestamp": .number(Double(v1.timestamp))])
            struct V1: Encodable {
                var format = "v1"
                var productId: String
                var offerId: String
                var keyIdentifier: String
                var nonce: String
                var timestamp: Int64
                /// Base64 of the DER signature (StoreKit 1's `SKPaymentDiscount.signature`).
                var signature: String
                /// The same DER bytes, as numbers (StoreKit 2's `signature: Data`: `Data(signatureBytes)`).
                var signatureBytes: [UInt8]
                /// The purchase must carry this token (`.appAccountToken(_:)`): it is part of what was signed.
                var appAccountToken: String
            }
            return StorekeeperApplication.jsonResponse(
                V1(
                    productId: productId, offerId: offerId, keyIdentifier: v1.keyIdentifier, nonce: v1.nonce, timestamp: v1.timestamp,
                    signature: v1.signature, signatureBytes: Array(Data(base64Encoded: v1.signature) ?? Data()), appAccountToken: token.description))
        }
    }

    /// With `subscriptionGroups` given, a product in none of them is refused: `what` (offers, introductory offers) are a
    /// subscription's, and the groups list every product of the app's.
    static func requireGrouped(_ productId: String, policy: OfferPolicy, facts: OfferPolicy.Facts, what: String) throws(APIError) {
        guard !policy.subscriptionGroups.isEmpty, facts.group == nil || policy.subscriptionGroups[facts.group ?? ""] == nil else { return }
        throw APIError(
            .badRequest, .invalidParameter,
            "product \(UntrustedText.quoted(productId, limit: 64)) is in no subscription group of offers.subscriptionGroups: \(what) are a subscription's"
        )
    }

    /// A signature that could not be written to the audit log is not given.
    static let unaudited = APIError(
        .serviceUnavailable, .storageUnavailable, "the signature could not be written to the audit log; none was given: retry")

    /// Writes a refusal to the audit log. The refusal stands whether or not the log takes it; a log that does not is
    /// said in the server's log.
    func auditRefusal(_ refusal: SupportAction, logger: Logger) async {
        do {
            _ = try await store.recordSupportAction(refusal)
        } catch {
            logger.error(
                "an offer signature's refusal could not be written to the audit log",
                metadata: ["error": .string(UntrustedText.escaped(error.message, limit: 300))])
        }
    }

    func eligibility(_ request: Request, customerId: String, identity: APIKeyIdentity) async throws -> Response {
        let query = try QueryParameters(request, allowed: ["bundleId", "environment"])
        let body: EligibilityBody = try await Self.body(request, #"{"productId": "…"}"#)
        let productId = try Self.identifier(body.productId, "productId")
        let (key, policy, scope, facts) = try await context(query, identity: identity, customerId: customerId, productId: productId, offerId: nil)
        try Self.requireGrouped(productId, policy: policy, facts: facts, what: "introductory offers")
        guard let transactionId = facts.latestTransactionId else {
            throw APIError(
                .unprocessableContent, .noPurchases,
                "customer '\(customerId)' has no transaction in \(scope.bundleId) (\(scope.environment.rawValue)): the signature names one; StoreKit decides a new customer's eligibility itself"
            )
        }
        let allow = !facts.hadIntroductoryOffer
        let at = now()
        let jws = try OfferSignatures.introductoryOfferEligibilityJWS(
            key: key, productId: productId, allowIntroductoryOffer: allow, transactionId: transactionId, at: at)
        do {
            _ = try await store.recordSupportAction(
                SupportAction(
                    at: at, keyName: identity.name, customer: scope, action: SupportAction.Kind.signIntroductoryEligibility.rawValue,
                    target: productId, request: ["productId": .string(productId)], outcome: "done",
                    detail: [
                        "allowIntroductoryOffer": .bool(allow), "transactionId": .string(transactionId),
                        "group": facts.group.map { .string($0) } ?? .null,
                    ]
                ))
        } catch {
            // No signature leaves without its audit record.
            throw Self.unaudited
        }
        struct Answer: Encodable {
            var productId: String
            var allowIntroductoryOffer: Bool
            var transactionId: String
            var signedEligibility: String
        }
        return StorekeeperApplication.jsonResponse(
            Answer(productId: productId, allowIntroductoryOffer: allow, transactionId: transactionId, signedEligibility: jws))
    }

    /// The body, strictly; `shape` in the error.
    static func body<Body: Decodable>(_ request: Request, _ shape: String) async throws -> Body {
        let buffer = try await StorekeeperApplication.readBody(request)
        do {
            return try StrictJSONDecoder.decode(Body.self, from: Array(buffer.readableBytesView), file: "the body")
        } catch {
            throw APIError(
                .badRequest, .malformedBody,
                "the body must be JSON \(shape): " + UntrustedText.escaped(error.message, limit: StrictJSONDecoder.answerLimit))
        }
    }
}

extension APIError.Code {
    /// The app has no `offers` in the configuration (404).
    static let offersNotConfigured = Self(rawValue: "offers-not-configured")
}
