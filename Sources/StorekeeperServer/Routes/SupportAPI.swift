import AppStoreModels
import AppStoreServerAPI
import AppStoreSigning
import Foundation
import Hummingbird
import HummingbirdAuth
import Logging
import StorekeeperCore
import StorekeeperHTTP

/// The support API, behind ``APIKeyAuthenticator`` for `support` keys (one app's, or every app's) and `admin` keys;
/// an app key gets 403. `GET /v1/support/search?q=…` finds customers by customer ID, transaction ID, original
/// transaction ID, app account token or order ID (``SupportSearch``); `GET /v1/support/customers/{id}` answers what support needs
/// to see of one customer: their state (the JSON of `GET /v1/customers/{id}`), their purchases as the ledger holds
/// them, and their timeline (the outbox's events, oldest first: every change of their state with its cause).
struct SupportAPI: Sendable {
    let configuration: ServerConfiguration
    let store: any LedgerStore
    let reader: CustomerReader<ByteBuffer>
    let now: @Sendable () -> Date
    /// The App Store Server API of each app and environment with credentials, and the verifier of what it answers:
    /// for order IDs, refund history and actions.
    let appStore: [VerifierKey: AppStoreAccess]
    let logger: Logger

    /// The longest a request waits for the App Store: it answers within the server's response timeout, whatever
    /// Apple does.
    var appStoreBudget: Duration { .milliseconds(Int64(min(20, configuration.http.responseTimeout / 2) * 1_000)) }

    /// The most events a customer page shows (the latest ones); `GET /v1/events?customer=…` pages through all.
    static let timelineLimit = 500

    func addRoutes(to group: RouterGroup<StorekeeperRequestContext>) {
        group.get("/search") { request, context in
            try await search(request, identity: try context.requireIdentity())
        }
        group.get("/customers/:customerId") { request, context in
            try await customer(request, customerId: try CustomerAPI.customerId(context), identity: try context.requireIdentity())
        }
        group.get("/customers/:customerId/refunds") { request, context in
            try await refunds(request, customerId: try CustomerAPI.customerId(context), identity: try context.requireIdentity())
        }
        group.post("/mass-extensions") { request, context in
            try await massExtend(request, identity: try context.requireIdentity())
        }
        group.get("/mass-extensions") { request, context in
            try await massExtensions(request, identity: try context.requireIdentity())
        }
        group.get("/mass-extensions/:productId/:requestIdentifier") { request, context in
            try await massExtensionStatus(
                request, productId: context.parameters.get("productId") ?? "", requestIdentifier: context.parameters.get("requestIdentifier") ?? "",
                identity: try context.requireIdentity())
        }
        group.post("/customers/:customerId/subscriptions/:originalTransactionId/extend") { request, context in
            try await extend(
                request, customerId: try CustomerAPI.customerId(context),
                originalTransactionId: context.parameters.get("originalTransactionId") ?? "",
                identity: try context.requireIdentity())
        }
    }

    /// The apps and environments a key supports: its app's, or every configured one.
    func apps(for identity: APIKeyIdentity) -> [VerifierKey] {
        configuration.apps.filter { identity.bundleId == nil || $0.bundleId == identity.bundleId }.flatMap { app in
            app.environments.map { VerifierKey(bundleId: app.bundleId, environment: $0) }
        }
    }

    func search(_ request: Request, identity: APIKeyIdentity) async throws -> Response {
        let query = try QueryParameters(request, allowed: ["q"])
        guard let text = query.string("q")?.trimmingCharacters(in: .whitespaces), !text.isEmpty else {
            throw APIError(
                .badRequest, .invalidParameter,
                "give q: a customer ID, a transaction ID, an original transaction ID, an app account token or an order ID")
        }
        guard text.utf8.count <= 128 else {
            throw APIError(.badRequest, .invalidParameter, "q is \(text.utf8.count) bytes: no ID searched here is longer than 128")
        }
        let found: SupportSearch.Result
        do {
            found = try await SupportSearch(store: store, apps: apps(for: identity), orderLookups: appStore).searchWithOrders(
                text, budget: appStoreBudget)
        } catch {
            throw APIError(.serviceUnavailable, .storageUnavailable, "the ledger could not be searched; retry")
        }
        if found.matches.isEmpty, !found.lookupFailures.isEmpty {
            throw APIError(.badGateway, .orderLookupFailed, "nothing found in the ledger, and " + found.lookupFailures.joined(separator: "; "))
        }
        guard !found.matches.isEmpty else {
            throw APIError(
                .notFound, .noMatch,
                "no customer of \(identity.bundleId ?? "any app") has the customer ID, transaction ID, original transaction ID, app account token or order ID \(UntrustedText.quoted(text, limit: 128))"
            )
        }
        struct Found: Encodable {
            var matches: [SupportMatch]
            /// Order look-ups that failed while others, or the ledger, answered.
            var warnings: [String]?
        }
        return StorekeeperApplication.jsonResponse(
            Found(matches: found.matches, warnings: found.lookupFailures.isEmpty ? nil : found.lookupFailures))
    }

    /// One customer as support sees them, in one app and environment (`bundleId` and `environment` as the customer
    /// routes take them); 404 when the app has no data for them.
    func customer(_ request: Request, customerId: String, identity: APIKeyIdentity) async throws -> Response {
        let query = try QueryParameters(request, allowed: ["bundleId", "environment"])
        let (bundleId, environment) = try CustomerAPI.scope(of: query, identity: identity, configuration.apps)
        let state: ByteBuffer
        switch await reader.read(customerId, bundleId: bundleId, environment: environment, now: now) {
        case .found(let body): state = body
        case .unknownCustomer:
            throw APIError(.notFound, .unknownCustomer, "no customer '\(customerId)' for \(bundleId) in \(environment)")
        case .storageFailure:
            throw APIError(.serviceUnavailable, .storageUnavailable, "the ledger could not be read")
        }
        let ledger: Ledger
        let actions: [SupportAction]
        var events: [LedgerEvent] = []
        do {
            ledger = try await store.ledger(for: customerId, bundleId: bundleId, environment: environment)
            actions = try await store.supportActions(customer: CustomerKey(bundleId: bundleId, environment: environment, customerId: customerId))
            let filter = EventFilter(bundleIds: [bundleId], environment: environment, customerId: customerId)
            var after: Int64 = 0
            while true {
                let page = try await store.events(after: after, limit: 200, filter: filter)
                events += page
                if events.count > Self.timelineLimit { events.removeFirst(events.count - Self.timelineLimit) }
                guard page.count == 200, let last = page.last else { break }
                after = last.position
            }
        } catch {
            throw APIError(.serviceUnavailable, .storageUnavailable, "the ledger could not be read")
        }
        // A customer erased, then met again under the same ID, is a new identity: the earlier actions stay in the log
        // (for accounting) but are not shown as theirs.
        let erasedAt =
            actions.last { $0.action == SupportAction.Kind.eraseCustomer.rawValue }?.at
            ?? events.last { $0.type == .customerErased }?.draft.occurredAt
        let shownActions = actions.filter { action in erasedAt.map { action.at > $0 } ?? true }
        let purchases = ledger.transactions.values
            .filter { $0.info.bundleId == bundleId && ledger.customer(of: $0) == customerId }
            .sorted { ($0.info.purchaseDate, $0.info.transactionId) < ($1.info.purchaseDate, $1.info.transactionId) }
            .map { Purchase(source: $0.source, transaction: $0.info) }
        // Written as parts: the state and the events are JSON already (the customer read's, the events API's).
        var body = ByteBuffer(string: "{\"actions\":")
        body.writeBytes((try? AppStoreJSON.makeEncoder().encode(shownActions)) ?? Data("[]".utf8))
        body.writeString(",\"customer\":")
        body.writeImmutableBuffer(state)
        body.writeString(",\"events\":[")
        for (index, event) in events.enumerated() {
            if index > 0 { body.writeString(",") }
            body.writeImmutableBuffer(event.json())
        }
        body.writeString("],\"purchases\":")
        body.writeBytes((try? AppStoreJSON.makeEncoder().encode(purchases)) ?? Data("[]".utf8))
        body.writeString("}")
        return StorekeeperApplication.jsonResponse(encoded: body)
    }

    /// A purchase as the ledger holds it: the App Store's transaction and what delivered its latest version (a
    /// notification UUID, `app`, or the App Store Server API).
    struct Purchase: Encodable {
        var source: String
        var transaction: TransactionInfo
    }

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
        // Percent-decoded, as customer IDs are (`%32…` is `2…`).
        let originalTransactionId =
            originalTransactionId.contains("%") ? originalTransactionId.removingPercentEncoding ?? originalTransactionId : originalTransactionId
        guard !originalTransactionId.isEmpty, originalTransactionId.utf8.count <= 64,
            originalTransactionId.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") })
        else {
            throw APIError(
                .badRequest, .invalidParameter,
                "\(UntrustedText.quoted(originalTransactionId, limit: 64)) is not an original transaction ID (Apple's are digits)")
        }
        let buffer = try await StorekeeperApplication.readBody(request)
        guard buffer.readableBytes > 0 else {
            throw APIError(.badRequest, .malformedBody, #"the body is empty: give JSON {"days": 1-90, "reason": 0-3, "note": "…"}"#)
        }
        let body: ExtendBody
        do {
            body = try StrictJSONDecoder.decode(ExtendBody.self, from: Array(buffer.readableBytesView), file: "the body")
        } catch {
            throw APIError(
                .badRequest, .malformedBody,
                #"the body must be JSON {"days": 1-90, "reason": 0-3, "note": "…"}: "# + UntrustedText.escaped(error.message, limit: 300))
        }
        guard SubscriptionExtender.days.contains(body.days) else {
            throw APIError(.badRequest, .invalidParameter, "days is \(body.days): the App Store extends by 1 to 90 days")
        }
        guard ExtendReasonCode.knownValues.map(\.rawValue).contains(body.reason) else {
            throw APIError(
                .badRequest, .invalidParameter,
                "reason is \(body.reason): give 0 (undeclared), 1 (customer satisfaction), 2 (other) or 3 (service issue or outage)")
        }
        if let note = body.note, note.utf8.count > 500 {
            throw APIError(.badRequest, .invalidParameter, "note is \(note.utf8.count) bytes: at most 500")
        }
        let (bundleId, environment) = try CustomerAPI.scope(of: query, identity: identity, configuration.apps)
        let app = VerifierKey(bundleId: bundleId, environment: environment)
        let extender = SubscriptionExtender(store: store, client: appStore[app]?.client, now: now, budget: appStoreBudget)
        let outcome: SubscriptionExtender.Outcome
        do {
            outcome = try await extender.extend(
                originalTransactionId, of: CustomerKey(bundleId: bundleId, environment: environment, customerId: customerId), days: body.days,
                reason: ExtendReasonCode(rawValue: body.reason), note: body.note, keyName: identity.name)
        } catch {
            throw APIError(
                .serviceUnavailable, .storageUnavailable,
                "the ledger could not be read, or the App Store's answer could not be recorded: look at the customer's timeline before trying again")
        }
        struct Done: Encodable { var action: SupportAction }
        let logged: SupportAction? = {
            switch outcome {
            case .extended(let action), .refused(let action, _), .failed(let action, _), .unknownSubscription(let action): action
            case .noCredentials: nil
            }
        }()
        if let logged {
            // Every action in the log too, with the key's name (never the key) and the audit record it wrote.
            logger.info(
                "support action",
                metadata: [
                    "support.action": .string(logged.action), "support.outcome": .string(logged.outcome),
                    "support.audit_id": .stringConvertible(logged.id),
                    "api_key": .string(identity.name), "customer.id": .string(customerId), "app.bundle_id": .string(bundleId),
                    "original_transaction_id": .string(originalTransactionId),
                ])
        }
        switch outcome {
        case .extended(let action):
            return StorekeeperApplication.jsonResponse(Done(action: action))
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
            throw APIError(
                .notFound, .noCredentials,
                "app \(bundleId) (\(environment.rawValue)) has no App Store Server API credentials (serverAPI in the configuration)")
        }
    }

    /// `GET /v1/support/customers/{id}/refunds` — the customer's refunds as the App Store records them (Get Refund
    /// History for each of their purchases' Apple accounts, every transaction verified), newest first.
    func refunds(_ request: Request, customerId: String, identity: APIKeyIdentity) async throws -> Response {
        let query = try QueryParameters(request, allowed: ["bundleId", "environment"])
        let (bundleId, environment) = try CustomerAPI.scope(of: query, identity: identity, configuration.apps)
        guard let api = appStore[VerifierKey(bundleId: bundleId, environment: environment)] else {
            throw APIError(
                .notFound, .noCredentials,
                "app \(bundleId) (\(environment.rawValue)) has no App Store Server API credentials (serverAPI in the configuration)")
        }
        let ledger: Ledger
        do {
            guard try await store.customerExists(customerId, bundleId: bundleId, environment: environment) else {
                throw APIError(.notFound, .unknownCustomer, "no customer '\(customerId)' for \(bundleId) in \(environment)")
            }
            ledger = try await store.ledger(for: customerId, bundleId: bundleId, environment: environment)
        } catch let error as APIError {
            throw error
        } catch {
            throw APIError(.serviceUnavailable, .storageUnavailable, "the ledger could not be read")
        }
        // One call per purchase family: Apple answers for the whole Apple account of the transaction given, and a
        // customer may have bought with several accounts.
        let families = Set(
            ledger.transactions.values.filter { $0.info.bundleId == bundleId && ledger.customer(of: $0) == customerId }
                .map(\.info.originalTransactionId)
        ).sorted()
        let client = api.client
        let verifier = api.verifier
        let asked = families
        let answered = await withinBudget(appStoreBudget) { () -> Swift.Result<[TransactionInfo], APIError> in
            var refunds: [TransactionInfo] = []
            for family in asked {
                do {
                    for try await page in try client.refunds(family, verifier: verifier) { refunds += page.map(\.payload) }
                } catch {
                    return .failure(
                        APIError(
                            .badGateway, .appStoreUnavailable,
                            "Get Refund History failed for \(family): \(UntrustedText.escaped(String(describing: error), limit: 300))"))
                }
            }
            return .success(refunds)
        }
        guard let answered else {
            throw APIError(.badGateway, .appStoreUnavailable, "the App Store did not answer within \(appStoreBudget.components.seconds) s")
        }
        // Apple answers for the whole Apple account: only this customer's purchases are theirs to see (another
        // customer of the app may have bought with the same account).
        let theirs = Set(families)
        var refunds: [String: TransactionInfo] = [:]
        for transaction in try answered.get() where theirs.contains(transaction.originalTransactionId) {
            refunds[transaction.transactionId] = transaction
        }
        struct Refunds: Encodable {
            var refunds: [TransactionInfo]
            /// The purchases whose Apple accounts were asked.
            var purchasesChecked: Int
        }
        let sorted = refunds.values.sorted {
            ($0.revocationDate ?? .distantPast, $0.transactionId) > ($1.revocationDate ?? .distantPast, $1.transactionId)
        }
        return StorekeeperApplication.jsonResponse(Refunds(refunds: sorted, purchasesChecked: families.count))
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
        let buffer = try await StorekeeperApplication.readBody(request)
        guard buffer.readableBytes > 0 else {
            throw APIError(.badRequest, .malformedBody, #"the body is empty: give JSON {"productId": "…", "days": 1-90, "reason": 0-3}"#)
        }
        let body: MassExtendBody
        do {
            body = try StrictJSONDecoder.decode(MassExtendBody.self, from: Array(buffer.readableBytesView), file: "the body")
        } catch {
            throw APIError(
                .badRequest, .malformedBody,
                #"the body must be JSON {"productId": "…", "days": 1-90, "reason": 0-3, "storefronts": ["USA", …], "note": "…"}: "#
                    + UntrustedText.escaped(error.message, limit: 300))
        }
        // Apple's product IDs are letters, digits, periods, underscores and hyphens: nothing else reaches a log or a record.
        guard (1...128).contains(body.productId.utf8.count),
            body.productId.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "." || $0 == "_" || $0 == "-") })
        else {
            throw APIError(
                .badRequest, .invalidParameter,
                "productId \(UntrustedText.quoted(body.productId, limit: 64)) is not a product ID (letters, digits, '.', '_' and '-')")
        }
        guard SubscriptionExtender.days.contains(body.days) else {
            throw APIError(.badRequest, .invalidParameter, "days is \(body.days): the App Store extends by 1 to 90 days")
        }
        guard ExtendReasonCode.knownValues.map(\.rawValue).contains(body.reason) else {
            throw APIError(
                .badRequest, .invalidParameter,
                "reason is \(body.reason): give 0 (undeclared), 1 (customer satisfaction), 2 (other) or 3 (service issue or outage)")
        }
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
        if let note = body.note, note.utf8.count > 500 {
            throw APIError(.badRequest, .invalidParameter, "note is \(note.utf8.count) bytes: at most 500")
        }
        let (bundleId, environment) = try CustomerAPI.scope(of: query, identity: identity, configuration.apps)
        guard let client = appStore[VerifierKey(bundleId: bundleId, environment: environment)]?.client else {
            throw APIError(
                .notFound, .noCredentials,
                "app \(bundleId) (\(environment.rawValue)) has no App Store Server API credentials (serverAPI in the configuration)")
        }
        let identifier = UUID().uuidString.lowercased()
        var asked: [String: JSONValue] = [
            "productId": .string(body.productId), "days": .integer(Int64(body.days)), "reason": .integer(Int64(body.reason)),
        ]
        if let storefronts = body.storefronts { asked["storefronts"] = .array(storefronts.map { .string($0) }) }
        if let note = body.note { asked["note"] = .string(UntrustedText.escaped(note, limit: 3_000)) }
        let call = MassExtendRenewalDateRequest(
            requestIdentifier: identifier, extendByDays: body.days, extendReasonCode: ExtendReasonCode(rawValue: body.reason),
            productId: body.productId, storefrontCountryCodes: body.storefronts)
        let answered = await withinBudget(appStoreBudget) { () -> Swift.Result<MassExtendRenewalDateResponse, AppStoreServerAPIError> in
            do throws(AppStoreServerAPIError) {
                return .success(try await client.extendRenewalDatesForAllActiveSubscribers(call))
            } catch {
                return .failure(error)
            }
        }
        var detail: [String: JSONValue] = ["requestIdentifier": .string(identifier)]
        let outcome: String
        var failure: APIError?
        switch answered {
        case .success?:
            outcome = "done"
        case .failure(let error)?:
            if let status = error.httpStatus, (400..<500).contains(status), status != 401, status != 429 {
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
        logger.info(
            "support action",
            metadata: [
                "support.action": .string(action.action), "support.outcome": .string(outcome), "support.audit_id": .stringConvertible(action.id),
                "api_key": .string(identity.name), "app.bundle_id": .string(bundleId), "product_id": .string(body.productId),
            ])
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
        guard (1...128).contains(requestIdentifier.utf8.count), (1...128).contains(productId.utf8.count) else {
            throw APIError(.badRequest, .invalidParameter, "give the product ID and the requestIdentifier of the mass extension")
        }
        guard let client = appStore[VerifierKey(bundleId: bundleId, environment: environment)]?.client else {
            throw APIError(
                .notFound, .noCredentials,
                "app \(bundleId) (\(environment.rawValue)) has no App Store Server API credentials (serverAPI in the configuration)")
        }
        let answered = await withinBudget(appStoreBudget) { () -> Swift.Result<MassExtendRenewalDateStatusResponse, AppStoreServerAPIError> in
            do throws(AppStoreServerAPIError) {
                return .success(try await client.massExtensionStatus(productId: productId, requestIdentifier: requestIdentifier))
            } catch {
                return .failure(error)
            }
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
            throw APIError(.badGateway, .appStoreUnavailable, "the App Store failed: \(UntrustedText.escaped(error.detail, limit: 300))")
        case nil:
            throw APIError(.badGateway, .appStoreUnavailable, "the App Store did not answer within \(appStoreBudget.components.seconds) s")
        }
    }
}
