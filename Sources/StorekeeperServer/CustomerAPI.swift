package import AppStoreModels
import AppStoreSigning
package import Foundation
package import Hummingbird
import Logging
package import StorekeeperCore

/// The app API (API keys with scope `app`, for one app; `admin` keys for any):
/// `POST /v1/customers/{id}/transactions` with `{"signedTransaction"}` and `GET /v1/customers/{id}`.
struct CustomerAPI: Sendable {
    let store: any LedgerStore
    let configuration: ServerConfiguration
    let verifiers: [VerifierKey: SignedDataVerifier]
    let logger: Logger
    let metrics: ServerMetrics
    let now: @Sendable () -> Date
    let keysByHash: [String: ServerConfiguration.APIKey]
    /// Encoded answers by customer, app and environment, dropped by the store's change feed.
    let cache: CustomerCache<ByteBuffer>

    init(
        store: any LedgerStore, configuration: ServerConfiguration, verifiers: [VerifierKey: SignedDataVerifier],
        logger: Logger, metrics: ServerMetrics, now: @escaping @Sendable () -> Date
    ) {
        let cache = configuration.makeCustomerCache(of: ByteBuffer.self)
        store.changes.subscribe { customers in cache.invalidate(customers) }
        self.cache = cache
        self.metrics = metrics
        self.store = store
        self.configuration = configuration
        self.verifiers = verifiers
        self.logger = logger
        self.now = now
        self.keysByHash = Dictionary(configuration.apiKeys.map { ($0.sha256.lowercased(), $0) }) { first, _ in first }
    }

    struct SubmitBody: Decodable { var signedTransaction: String? }

    func addRoutes(to router: Router<BasicRequestContext>) {
        router.post("/v1/customers/:customerId/transactions") { request, context in
            await submit(request, customerId: context.parameters.get("customerId") ?? "")
        }
        router.get("/v1/customers/:customerId") { request, context in
            await read(request, customerId: context.parameters.get("customerId") ?? "")
        }
    }

    /// The app a request's key may act for (`nil` for admin keys: any), or an error answer.
    enum Authorization {
        /// Allowed, for one app (`nil`: any app).
        case allowed(String?)
        case denied(Response)
    }

    func authorize(_ request: Request) -> Authorization {
        guard let header = request.headers[.authorization], header.hasPrefix("Bearer ") else {
            return .denied(StorekeeperApplication.errorResponse(.unauthorized, "unauthorized", "an API key is required (Authorization: Bearer <key>)"))
        }
        let hash = ServerConfiguration.hash(apiKey: String(header.dropFirst("Bearer ".count)))
        guard let key = keysByHash[hash] else {
            return .denied(StorekeeperApplication.errorResponse(.unauthorized, "unauthorized", "unknown API key"))
        }
        return .allowed(key.scope == .admin ? nil : key.bundleId)
    }

    static func validCustomerId(_ id: String) -> Bool {
        !id.isEmpty && id.count <= 128 && id.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || "-_.@:".contains($0)) }
    }

    func submit(_ request: Request, customerId: String) async -> Response {
        let app: String?
        switch authorize(request) {
        case .denied(let response): return response
        case .allowed(let bundle): app = bundle
        }
        guard Self.validCustomerId(customerId) else {
            return StorekeeperApplication.errorResponse(.badRequest, "invalid-customer-id", "customer IDs are 1-128 letters, digits and -_.@:")
        }
        guard let buffer = await StorekeeperApplication.collectBody(request) else {
            return StorekeeperApplication.errorResponse(.contentTooLarge, "body-too-large", "the body is over 1 MiB")
        }
        guard let body = try? JSONDecoder().decode(SubmitBody.self, from: Data(buffer.readableBytesView)),
            let jws = body.signedTransaction, !jws.isEmpty
        else {
            return StorekeeperApplication.errorResponse(.badRequest, "malformed-body", #"the body must be JSON {"signedTransaction": "<JWS>"}"#)
        }
        let candidates = verifiers.filter { app == nil || $0.key.bundleId == app }.sorted { $0.key.environment.rawValue < $1.key.environment.rawValue }
        var lastError: VerificationError? = nil
        for (_, verifier) in candidates {
            do {
                let verified = try await verifier.verifyTransaction(jws)
                try await store.submit(verified, customerId: customerId)
                logger.info("transaction submitted", metadata: ["transaction.id": .string(verified.payload.transactionId), "customer.id": .string(customerId)])
                return await state(customerId, bundleId: verified.payload.bundleId, environment: verified.payload.environment ?? .production)
            } catch let error as VerificationError {
                lastError = error
            } catch {
                return StorekeeperApplication.errorResponse(.serviceUnavailable, "storage-unavailable", "the transaction could not be stored; retry")
            }
        }
        metrics.recordVerificationFailure(code: lastError?.code.rawValue ?? "unverifiable")
        let status: HTTPResponse.Status = [.bundleIDMismatch, .environmentMismatch].contains(lastError?.code) ? .forbidden : .badRequest
        return StorekeeperApplication.errorResponse(status, lastError?.code.rawValue ?? "unverifiable", lastError?.description ?? "no app accepts this transaction")
    }

    func read(_ request: Request, customerId: String) async -> Response {
        let app: String?
        switch authorize(request) {
        case .denied(let response): return response
        case .allowed(let bundle): app = bundle
        }
        guard let bundleId = app ?? request.uri.queryParameters.get("bundleId") ?? configuration.apps.first?.bundleId,
            let appConfiguration = configuration.apps.first(where: { $0.bundleId == bundleId })
        else {
            return StorekeeperApplication.errorResponse(.badRequest, "unknown-app", "give bundleId for an admin key")
        }
        let requested = request.uri.queryParameters.get("environment").map(AppStoreEnvironment.init(rawValue:))
        let environment = requested ?? (appConfiguration.environments.contains(.production) ? .production : .sandbox)
        guard appConfiguration.environments.contains(environment) else {
            return StorekeeperApplication.errorResponse(.badRequest, "unknown-environment", "app '\(bundleId)' does not accept \(environment)")
        }
        return await state(customerId, bundleId: bundleId, environment: environment)
    }

    /// The customer's state in one app and environment, or 404 when the app has no data for them. Answers come
    /// from the cache while no write has changed the customer and nothing has expired since they were computed.
    func state(_ customerId: String, bundleId: String, environment: AppStoreEnvironment) async -> Response {
        let variant = "\(bundleId) \(environment.rawValue)"
        let started = now()
        if let body = cache.value(customer: customerId, variant: variant, now: started) {
            metrics.recordCustomerCache(hit: true)
            return StorekeeperApplication.jsonResponse(encoded: body)
        }
        metrics.recordCustomerCache(hit: false)
        let ticket = cache.ticket()
        do {
            var ledger = try await store.entitlementLedger(for: customerId, environment: environment)
            ledger.transactions = ledger.transactions.filter { $0.value.info.bundleId == bundleId }
            guard !ledger.transactions.isEmpty || ledger.tokenOwners.values.contains(customerId) else {
                return StorekeeperApplication.errorResponse(.notFound, "unknown-customer", "no customer '\(customerId)' for \(bundleId) in \(environment)")
            }
            let at = now()
            let answer = try CustomerView.answer(
                for: customerId, in: ledger, bundleId: bundleId, environment: environment, configuration: configuration.entitlements, at: at
            )
            cache.store(answer.body, customer: customerId, variant: variant, validUntil: answer.validUntil, now: at, ticket: ticket)
            return StorekeeperApplication.jsonResponse(encoded: answer.body)
        } catch let error as StorageError {
            logger.error("customer read failed", metadata: ["customer.id": .string(customerId), "error": .string(error.message)])
            return StorekeeperApplication.errorResponse(.serviceUnavailable, "storage-unavailable", "the ledger could not be read")
        } catch {
            return StorekeeperApplication.errorResponse(.internalServerError, "encoding-failed", "the customer's state could not be encoded")
        }
    }
}

/// What `GET /v1/customers/{id}` answers.
package struct CustomerView: Encodable {
    /// The encoded answer for a customer from their ledger (narrowed to one app) at `now`, and until when it holds
    /// (the engine's next change).
    package static func answer(
        for customerId: String, in ledger: Ledger, bundleId: String, environment: AppStoreEnvironment,
        configuration: EntitlementConfiguration, at now: Date
    ) throws -> (body: ByteBuffer, validUntil: Date?) {
        let (state, nextChange) = EntitlementEngine(configuration: configuration).evaluate(customerId, in: ledger, environment: environment, at: now)
        let view = CustomerView(state: state, ledger: ledger, bundleId: bundleId)
        return (ByteBuffer(bytes: try AppStoreJSON.makeEncoder().encode(view)), nextChange)
    }

    struct Subscription: Encodable {
        var originalTransactionId: String
        var productId: String
        var status: Int?
        var expiresDate: Date?
        var autoRenew: Bool?
        var autoRenewProductId: String?
        var gracePeriodExpiresDate: Date?
        var isInBillingRetryPeriod: Bool?
        var ownership: String
        var statusFromNotification: String?
    }

    var customerId: String
    var bundleId: String
    var environment: String
    var entitlements: [Entitlement]
    var subscriptions: [Subscription]
    var nonConsumables: [String]
    var consumableBalance: [String: Int]

    init(state: CustomerState, ledger: Ledger, bundleId: String) {
        customerId = state.customerId
        self.bundleId = bundleId
        environment = state.environment.rawValue
        entitlements = state.entitlements
        consumableBalance = state.consumableBalance
        nonConsumables = Set(ledger.transactions.values.filter {
            $0.info.type == .nonConsumable && $0.info.revocationDate == nil
        }.map(\.info.productId)).sorted()
        let latest = EntitlementEngine.latestPerSubscription(Array(ledger.transactions.values))
        subscriptions = latest.sorted { $0.key < $1.key }.map { original, transaction in
            let subscription = ledger.subscriptions[LedgerKey(state.environment, original)]
            return Subscription(
                originalTransactionId: original, productId: transaction.info.productId, status: subscription?.status?.rawValue,
                expiresDate: transaction.info.expiresDate, autoRenew: subscription?.renewalInfo?.autoRenewStatus.map { $0 == .on },
                autoRenewProductId: subscription?.renewalInfo?.autoRenewProductId,
                gracePeriodExpiresDate: subscription?.renewalInfo?.gracePeriodExpiresDate,
                isInBillingRetryPeriod: subscription?.renewalInfo?.isInBillingRetryPeriod,
                ownership: transaction.info.inAppOwnershipType?.rawValue ?? "PURCHASED",
                statusFromNotification: subscription?.statusNotificationUUID
            )
        }
    }
}
