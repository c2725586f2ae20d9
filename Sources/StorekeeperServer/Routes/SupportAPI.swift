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
                request, productId: context.pathValue("productId"), requestIdentifier: context.pathValue("requestIdentifier"),
                identity: try context.requireIdentity())
        }
        addConsumptionRoutes(to: group)
        addGrantRoutes(to: group)
        group.get("/overview") { request, context in try await overview(request, identity: try context.requireIdentity()) }
        group.post("/customers/:customerId/subscriptions/:originalTransactionId/extend") { request, context in
            try await extend(
                request, customerId: try CustomerAPI.customerId(context),
                originalTransactionId: context.pathValue("originalTransactionId"),
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
        let page = try await customerPage(CustomerKey(bundleId: bundleId, environment: environment, customerId: customerId))
        // Written as parts: the state and the events are JSON already (the customer read's, the events API's).
        var body = ByteBuffer(string: "{\"actions\":")
        body.writeBytes((try? AppStoreJSON.makeEncoder().encode(page.actions)) ?? Data("[]".utf8))
        // Absent when the customer was never asked (a generated client reads an absent field best).
        if let consent = page.consent, let encoded = try? AppStoreJSON.makeEncoder().encode(consent) {
            body.writeString(",\"consumptionConsent\":")
            body.writeBytes(encoded)
        }
        body.writeString(",\"consumptionRequests\":")
        body.writeBytes((try? AppStoreJSON.makeEncoder().encode(page.consumptionRequests)) ?? Data("[]".utf8))
        body.writeString(",\"customer\":")
        body.writeImmutableBuffer(page.state)
        body.writeString(",\"events\":[")
        for (index, event) in page.events.enumerated() {
            if index > 0 { body.writeString(",") }
            body.writeImmutableBuffer(event.json())
        }
        body.writeString("],\"promotionalGrants\":")
        let at = now()
        body.writeBytes(
            (try? AppStoreJSON.makeEncoder().encode(page.grants.map { GrantView(grant: $0, active: $0.isActive(at: at)) })) ?? Data("[]".utf8))
        body.writeString(",\"purchases\":")
        body.writeBytes((try? AppStoreJSON.makeEncoder().encode(page.purchases)) ?? Data("[]".utf8))
        body.writeString("}")
        return StorekeeperApplication.jsonResponse(encoded: body)
    }

    /// What support sees of one customer (the support API's customer route and the dashboard's customer page).
    struct CustomerPage: Sendable {
        /// The JSON of `GET /v1/customers/{id}`.
        var state: ByteBuffer
        /// The audit log's records of this identity, oldest first.
        var actions: [SupportAction]
        var consent: ConsumptionConsent?
        var consumptionRequests: [ConsumptionRequestRecord]
        /// The latest ``timelineLimit`` events, oldest first.
        var events: [LedgerEvent]
        var purchases: [Purchase]
        /// Promotional grants, oldest first (revoked and expired ones too).
        var grants: [PromotionalGrant]
    }

    /// The JSON of `GET /v1/customers/{id}` for `key`; 404 when the app has no data for them.
    func customerState(_ key: CustomerKey) async throws(APIError) -> ByteBuffer {
        switch await reader.read(key.customerId, bundleId: key.bundleId, environment: key.environment, now: now) {
        case .found(let body): return body
        case .unknownCustomer:
            throw APIError(.notFound, .unknownCustomer, "no customer '\(key.customerId)' for \(key.bundleId) in \(key.environment)")
        case .storageFailure:
            throw APIError(.serviceUnavailable, .storageUnavailable, "the ledger could not be read")
        }
    }

    func customerPage(_ key: CustomerKey) async throws(APIError) -> CustomerPage {
        let (customerId, bundleId, environment) = (key.customerId, key.bundleId, key.environment)
        let state = try await customerState(key)
        let ledger: Ledger
        let actions: [SupportAction]
        let consumption: [ConsumptionRequestRecord]
        let consent: ConsumptionConsent?
        var events: [LedgerEvent] = []
        do {
            ledger = try await store.ledger(for: customerId, bundleId: bundleId, environment: environment)
            actions = try await store.supportActions(customer: key)
            consumption = try await store.consumptionRequests(.customer(key))
            consent = try await store.consumptionConsent(key)
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
        let purchases = ledger.transactions.values
            .filter { $0.info.bundleId == bundleId && ledger.customer(of: $0) == customerId }
            .sorted { ($0.info.purchaseDate, $0.info.transactionId) < ($1.info.purchaseDate, $1.info.transactionId) }
            .map { Purchase(source: $0.source, transaction: $0.info) }
        return CustomerPage(
            state: state, actions: actions.filter { action in erasedAt.map { action.at > $0 } ?? true }, consent: consent,
            consumptionRequests: consumption.filter { request in erasedAt.map { request.receivedAt > $0 } ?? true }, events: events,
            purchases: purchases,
            grants: ledger.grants.values.filter { $0.bundleId == bundleId }.sorted { ($0.grantedAt, $0.id) < ($1.grantedAt, $1.id) })
    }

    /// A purchase as the ledger holds it: the App Store's transaction and what delivered its latest version (a
    /// notification UUID, `app`, or the App Store Server API).
    struct Purchase: Encodable {
        var source: String
        var transaction: TransactionInfo
    }

    /// `GET /v1/support/customers/{id}/refunds` — the customer's refunds as the App Store records them (Get Refund
    /// History for each of their purchases' Apple accounts, every transaction verified), newest first.
    func refunds(_ request: Request, customerId: String, identity: APIKeyIdentity) async throws -> Response {
        let query = try QueryParameters(request, allowed: ["bundleId", "environment"])
        let (bundleId, environment) = try CustomerAPI.scope(of: query, identity: identity, configuration.apps)
        let (refunds, checked) = try await refundList(CustomerKey(bundleId: bundleId, environment: environment, customerId: customerId))
        struct Refunds: Encodable {
            var refunds: [TransactionInfo]
            /// The purchases whose Apple accounts were asked.
            var purchasesChecked: Int
        }
        return StorekeeperApplication.jsonResponse(Refunds(refunds: refunds, purchasesChecked: checked))
    }

    /// A customer's refunds as the App Store records them, newest first, and how many of their purchases' Apple
    /// accounts were asked.
    func refundList(_ key: CustomerKey) async throws(APIError) -> (refunds: [TransactionInfo], purchasesChecked: Int) {
        let (customerId, bundleId, environment) = (key.customerId, key.bundleId, key.environment)
        let api = try appStoreAccess(bundleId, environment)
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
        let sorted = refunds.values.sorted {
            ($0.revocationDate ?? .distantPast, $0.transactionId) > ($1.revocationDate ?? .distantPast, $1.transactionId)
        }
        return (sorted, families.count)
    }

    /// The App Store Server API of an app in an environment, or 404 naming the missing credentials.
    func appStoreAccess(_ bundleId: String, _ environment: AppStoreEnvironment) throws(APIError) -> AppStoreAccess {
        guard let access = appStore[VerifierKey(bundleId: bundleId, environment: environment)] else { throw noCredentials(bundleId, environment) }
        return access
    }

    func noCredentials(_ bundleId: String, _ environment: AppStoreEnvironment) -> APIError {
        APIError(
            .notFound, .noCredentials,
            "app \(bundleId) (\(environment.rawValue)) has no App Store Server API credentials (serverAPI in the configuration)")
    }

    /// Every support action in the log too, with the key's name (never the key) and the audit record it wrote.
    func log(_ action: SupportAction, by identity: APIKeyIdentity, _ more: Logger.Metadata) {
        var metadata: Logger.Metadata = [
            "support.action": .string(action.action), "support.outcome": .string(action.outcome), "support.audit_id": .stringConvertible(action.id),
            "api_key": .string(identity.name), "app.bundle_id": .string(action.customer.bundleId),
        ]
        metadata.merge(more) { $1 }
        logger.info("support action", metadata: metadata)
    }

    /// An App Store call given at most ``appStoreBudget``: its answer, or `nil` when it did not come in time.
    func callAppStore<T: Sendable>(
        _ call: @escaping @Sendable () async throws(AppStoreServerAPIError) -> T
    ) async -> Swift.Result<T, AppStoreServerAPIError>? {
        await withinBudget(appStoreBudget) { () -> Swift.Result<T, AppStoreServerAPIError> in
            do throws(AppStoreServerAPIError) {
                return .success(try await call())
            } catch {
                return .failure(error)
            }
        }
    }
}
