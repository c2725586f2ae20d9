import AppStoreModels
import AppStoreServerAPI
import Foundation
import Hummingbird
import Logging
import StorekeeperCore
import StorekeeperHTTP

/// The support API's actions at the App Store: extending one customer's subscription, and every active subscriber of
/// a product (``SupportAPI``).
extension SupportAPI {
    /// `{"days": 1-90, "reason": 0-3, "note"?}`, read strictly.
    struct ExtendBody: Decodable {
        var days: Int
        var reason: Int
        var note: String?
    }

    /// `POST /v1/support/customers/{id}/subscriptions/{originalTransactionId}/extend` — Extend a Subscription Renewal
    /// Date at the App Store for one of the customer's subscriptions (``SubscriptionExtender``), audited.
    func extend(_ request: Request, customerId: String, originalTransactionId: String, identity: APIKeyIdentity) async throws -> Response {
        let query = try QueryParameters(request, allowed: ["bundleId", "environment"])
        // (Percent-decoded by the route, as customer IDs are: `%32…` is `2…`.)
        guard !originalTransactionId.isEmpty, originalTransactionId.utf8.count <= 64,
            originalTransactionId.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") })
        else {
            throw APIError(
                .badRequest, .invalidParameter,
                "\(UntrustedText.quoted(originalTransactionId, limit: 64)) is not an original transaction ID (Apple's are digits)")
        }
        let body = try await Self.body(request, as: ExtendBody.self, shape: #"{"days": 1-90, "reason": 0-3, "note": "…"}"#)
        try Self.checkExtension(days: body.days, reason: body.reason, note: body.note)
        let (bundleId, environment) = try CustomerAPI.writeScope(of: query, identity: identity, configuration.apps)
        struct Done: Encodable { var action: SupportAction }
        let action = try await performExtension(
            originalTransactionId, of: CustomerKey(bundleId: bundleId, environment: environment, customerId: customerId), days: body.days,
            reason: body.reason, note: body.note, identity: identity)
        return StorekeeperApplication.jsonResponse(Done(action: action))
    }

    /// Extends one of the customer's subscriptions (``SubscriptionExtender``), logged; the audit record when the App
    /// Store extended it, the error answer (naming the audit record) otherwise. `days`, `reason` and `note` checked.
    func performExtension(
        _ originalTransactionId: String, of customer: CustomerKey, days: Int, reason: Int, note: String?, identity: APIKeyIdentity
    ) async throws(APIError) -> SupportAction {
        let (customerId, bundleId, environment) = (customer.customerId, customer.bundleId, customer.environment)
        let app = VerifierKey(bundleId: bundleId, environment: environment)
        let extender = SubscriptionExtender(store: store, client: appStore[app]?.client, now: now, budget: appStoreBudget)
        let outcome: SubscriptionExtender.Outcome
        do {
            outcome = try await extender.extend(
                originalTransactionId, of: customer, days: days, reason: ExtendReasonCode(rawValue: reason), note: note, keyName: identity.name)
        } catch {
            throw APIError(
                .serviceUnavailable, .storageUnavailable,
                "the ledger could not be read, or the App Store's answer could not be recorded: look at the customer's timeline before trying again")
        }
        let logged: SupportAction? = {
            switch outcome {
            case .extended(let action), .refused(let action, _), .failed(let action, _), .unknownSubscription(let action): action
            case .noCredentials: nil
            }
        }()
        if let logged {
            log(logged, by: identity, ["customer.id": .string(customerId), "original_transaction_id": .string(originalTransactionId)])
        }
        switch outcome {
        case .extended(let action):
            return action
        case .refused(let action, let reason):
            // Storekeeper's own checks name a `code`; the rest is the App Store's answer.
            let code: APIError.Code = action.detail["code"] == nil ? .appStoreRefused : .extensionRefused
            throw APIError(.conflict, code, reason + " (audit record \(action.id))")
        case .failed(let action, let reason):
            throw APIError(.badGateway, .appStoreUnavailable, reason + " (audit record \(action.id))")
        case .unknownSubscription(let action):
            throw APIError(
                .notFound, .unknownSubscription,
                "customer '\(customerId)' has no subscription \(originalTransactionId) in \(bundleId) (\(environment.rawValue)) (audit record \(action.id))"
            )
        case .noCredentials:
            throw noCredentials(bundleId, environment)
        }
    }

    /// `{"productId", "days": 1-90, "reason": 0-3, "storefronts"?: [ISO 3166-1 alpha-3], "note"?}`, read strictly.
    struct MassExtendBody: Decodable {
        var productId: String
        var days: Int
        var reason: Int
        var storefronts: [String]?
        var note: String?
    }

    /// `POST /v1/support/mass-extensions` — Extend Subscription Renewal Dates for All Active Subscribers of one
    /// product at the App Store (Apple works through them over hours; each extended subscription's
    /// RENEWAL_EXTENDED notification moves its date), audited as an app-wide action; answers the audit record, whose
    /// `detail.requestIdentifier` asks Apple for the progress.
    func massExtend(_ request: Request, identity: APIKeyIdentity) async throws -> Response {
        let query = try QueryParameters(request, allowed: ["bundleId", "environment"])
        let body = try await Self.body(
            request, as: MassExtendBody.self, shape: #"{"productId": "…", "days": 1-90, "reason": 0-3, "storefronts": ["USA", …], "note": "…"}"#)
        // Apple's product IDs are letters, digits, periods, underscores and hyphens: nothing else reaches a log or a record.
        guard (1...128).contains(body.productId.utf8.count),
            body.productId.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "." || $0 == "_" || $0 == "-") })
        else {
            throw APIError(
                .badRequest, .invalidParameter,
                "productId \(UntrustedText.quoted(body.productId, limit: 64)) is not a product ID (letters, digits, '.', '_' and '-')")
        }
        try Self.checkExtension(days: body.days, reason: body.reason, note: body.note)
        if let storefronts = body.storefronts {
            guard !storefronts.isEmpty else {
                throw APIError(.badRequest, .invalidParameter, "storefronts is empty: leave it out for every storefront")
            }
            for code in storefronts where !(code.utf8.count == 3 && code.utf8.allSatisfy { (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains($0) }) {
                throw APIError(
                    .badRequest, .invalidParameter,
                    "storefront \(UntrustedText.quoted(code, limit: 16)) is not an ISO 3166-1 alpha-3 code (USA, FRA, …)")
            }
        }
        let (bundleId, environment) = try CustomerAPI.writeScope(of: query, identity: identity, configuration.apps)
        let client = try appStoreAccess(bundleId, environment).client
        let identifier = UUID().uuidString.lowercased()
        var asked: [String: JSONValue] = [
            "productId": .string(body.productId), "days": .integer(Int64(body.days)), "reason": .integer(Int64(body.reason)),
        ]
        if let storefronts = body.storefronts { asked["storefronts"] = .array(storefronts.map { .string($0) }) }
        if let note = body.note { asked["note"] = .string(UntrustedText.escaped(note, limit: 3_000)) }
        let call = MassExtendRenewalDateRequest(
            requestIdentifier: identifier, extendByDays: body.days, extendReasonCode: ExtendReasonCode(rawValue: body.reason),
            productId: body.productId, storefrontCountryCodes: body.storefronts)
        let answered = await callAppStore { () async throws(AppStoreServerAPIError) in
            try await client.extendRenewalDatesForAllActiveSubscribers(call)
        }
        var detail: [String: JSONValue] = ["requestIdentifier": .string(identifier)]
        let outcome: String
        var failure: APIError?
        switch answered {
        case .success?:
            outcome = "done"
        case .failure(let error)?:
            if let status = SubscriptionExtender.refusalStatus(error) {
                outcome = "refused"
                let reason = SubscriptionExtender.refusal(error, status: status)
                if let code = error.errorCode { detail["appleErrorCode"] = .integer(Int64(code)) }
                if let named = error.errorCode.flatMap(APIErrorCode.named) { detail["appleError"] = .string(named.name) }
                detail["reason"] = .string(reason)
                failure = APIError(.conflict, .appStoreRefused, reason)
            } else {
                outcome = "failed"
                let reason = "the App Store could not be reached or failed: \(UntrustedText.escaped(error.detail, limit: 300))"
                detail["reason"] = .string(reason)
                failure = APIError(.badGateway, .appStoreUnavailable, reason)
            }
        case nil:
            outcome = "failed"
            let reason =
                "the App Store did not answer within \(appStoreBudget.components.seconds) s: the extension may have been asked for; ask its status with requestIdentifier \(identifier)"
            detail["reason"] = .string(reason)
            failure = APIError(.badGateway, .appStoreUnavailable, reason)
        }
        var action = SupportAction(
            at: now(), keyName: identity.name, customer: CustomerKey(bundleId: bundleId, environment: environment, customerId: SupportAction.appWide),
            action: SupportAction.Kind.massExtendRenewalDate.rawValue, target: body.productId, request: asked, outcome: outcome, detail: detail)
        do {
            action.id = try await store.recordSupportAction(action)
        } catch {
            // Apple has answered: a retry could ask it again. Said plainly, never "retry".
            throw APIError(
                .serviceUnavailable, .storageUnavailable,
                "the App Store answered (\(outcome)), but the audit record could not be written: do not ask again before checking "
                    + "GET /v1/support/mass-extensions/\(body.productId)/\(identifier)")
        }
        log(action, by: identity, ["product_id": .string(body.productId)])
        if let failure { throw APIError(failure.status, failure.code, failure.message + " (audit record \(action.id))") }
        struct Done: Encodable { var action: SupportAction }
        return StorekeeperApplication.jsonResponse(Done(action: action))
    }

    /// `GET /v1/support/mass-extensions` — the app's mass extensions, as the audit log holds them, oldest first.
    func massExtensions(_ request: Request, identity: APIKeyIdentity) async throws -> Response {
        let query = try QueryParameters(request, allowed: ["bundleId", "environment"])
        let (bundleId, environment) = try CustomerAPI.scope(of: query, identity: identity, configuration.apps)
        let actions: [SupportAction]
        do {
            actions = try await store.supportActions(
                customer: CustomerKey(bundleId: bundleId, environment: environment, customerId: SupportAction.appWide))
        } catch {
            throw APIError(.serviceUnavailable, .storageUnavailable, "the audit log could not be read")
        }
        struct Listed: Encodable { var actions: [SupportAction] }
        return StorekeeperApplication.jsonResponse(Listed(actions: actions))
    }

    /// `GET /v1/support/mass-extensions/{productId}/{requestIdentifier}` — the progress Apple reports (Get Status of
    /// Subscription Renewal Date Extensions): complete or not, how many succeeded and failed.
    func massExtensionStatus(_ request: Request, productId: String, requestIdentifier: String, identity: APIKeyIdentity) async throws -> Response {
        let query = try QueryParameters(request, allowed: ["bundleId", "environment"])
        let (bundleId, environment) = try CustomerAPI.scope(of: query, identity: identity, configuration.apps)
        // What Storekeeper sends Apple (a UUID, or the caller's own: letters, digits, '.', '_' and '-'), checked here: a
        // path Apple would refuse is the caller's mistake (400), not the App Store failing.
        let plain: (String) -> Bool = { text in
            (1...128).contains(text.utf8.count)
                && text.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "." || $0 == "_" || $0 == "-") }
        }
        guard plain(productId), plain(requestIdentifier) else {
            throw APIError(
                .badRequest, .invalidParameter,
                "give the product ID and the requestIdentifier of the mass extension (1-128 letters, digits, '.', '_' or '-'), not \(UntrustedText.quoted(productId, limit: 64)) and \(UntrustedText.quoted(requestIdentifier, limit: 64))"
            )
        }
        let client = try appStoreAccess(bundleId, environment).client
        let answered = await callAppStore { () async throws(AppStoreServerAPIError) in
            try await client.massExtensionStatus(productId: productId, requestIdentifier: requestIdentifier)
        }
        switch answered {
        case .success(let status)?:
            return StorekeeperApplication.jsonResponse(status)
        case .failure(let error)?:
            if error.httpStatus == 404 {
                throw APIError(
                    .notFound, .unknownMassExtension,
                    "the App Store knows no mass extension \(UntrustedText.quoted(requestIdentifier, limit: 64)) of \(UntrustedText.quoted(productId, limit: 64))"
                )
            }
            if error.httpStatus == 400 {
                // Apple refused what was asked (its error named): the caller's to mend.
                throw APIError(
                    .badRequest, .invalidParameter, "the App Store refused the request: \(UntrustedText.escaped(error.detail, limit: 300))")
            }
            throw APIError(.badGateway, .appStoreUnavailable, "the App Store failed: \(UntrustedText.escaped(error.detail, limit: 300))")
        case nil:
            throw APIError(.badGateway, .appStoreUnavailable, "the App Store did not answer within \(appStoreBudget.components.seconds) s")
        }
    }

    /// A request's JSON body, read strictly; an empty or malformed one refused naming the `shape` the route takes.
    static func body<T: Decodable>(_ request: Request, as type: T.Type, shape: String) async throws -> T {
        let buffer = try await StorekeeperApplication.readBody(request)
        guard buffer.readableBytes > 0 else { throw APIError(.badRequest, .malformedBody, "the body is empty: give JSON \(shape)") }
        do {
            return try StrictJSONDecoder.decode(type, from: Array(buffer.readableBytesView), file: "the body")
        } catch {
            throw APIError(
                .badRequest, .malformedBody,
                "the body must be JSON \(shape): " + UntrustedText.escaped(error.message, limit: StrictJSONDecoder.answerLimit))
        }
    }

    /// An extension's `days`, `reason` and `note` as the App Store and the audit log take them.
    static func checkExtension(days: Int, reason: Int, note: String?) throws(APIError) {
        guard SubscriptionExtender.days.contains(days) else {
            throw APIError(.badRequest, .invalidParameter, "days is \(days): the App Store extends by 1 to 90 days")
        }
        guard ExtendReasonCode.knownValues.map(\.rawValue).contains(reason) else {
            throw APIError(
                .badRequest, .invalidParameter,
                "reason is \(reason): give 0 (undeclared), 1 (customer satisfaction), 2 (other) or 3 (service issue or outage)")
        }
        if let note, note.utf8.count > 500 {
            throw APIError(.badRequest, .invalidParameter, "note is \(note.utf8.count) bytes: at most 500")
        }
    }
}
