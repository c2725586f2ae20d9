import AppStoreModels
import AppStoreSigning
import Foundation
import Hummingbird
import Logging
import StorekeeperCore

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
            await submit(request, customerId: Self.customerId(context))
        }
        router.get("/v1/customers/:customerId") { request, context in
            await read(request, customerId: Self.customerId(context))
        }
    }

    /// The path's customer ID, percent-decoded: `a%40b` and `a@b` are the same customer, whichever way a client
    /// encodes the path. A malformed escape is kept as it came, and then refused as an invalid ID.
    static func customerId(_ context: BasicRequestContext) -> String {
        let raw = context.parameters.get("customerId") ?? ""
        return raw.removingPercentEncoding ?? raw
    }

    static func invalidCustomerId(_ id: String) -> Response {
        let shown = UntrustedText.escaped(id.count > 64 ? id.prefix(64) + "…" : Substring(id), limit: 512)
        return StorekeeperApplication.errorResponse(
            .badRequest, "invalid-customer-id", "customer ID '\(shown)' is not valid: customer IDs are 1-128 ASCII letters, digits and -_.@:"
        )
    }

    /// The app a request's key may act for (`nil` for admin keys: any), or an error answer.
    enum Authorization {
        /// Allowed, for one app (`nil`: any app).
        case allowed(String?)
        case denied(Response)
    }

    func authorize(_ request: Request) -> Authorization {
        // The scheme is case-insensitive (RFC 9110 §11.1).
        guard let header = request.headers[.authorization], header.count > 7, header.prefix(7).lowercased() == "bearer " else {
            return .denied(StorekeeperApplication.errorResponse(.unauthorized, "unauthorized", "an API key is required (Authorization: Bearer <key>)"))
        }
        let hash = ServerConfiguration.hash(apiKey: header.dropFirst(7).trimmingCharacters(in: .whitespaces))
        guard let key = keysByHash[hash] else {
            return .denied(StorekeeperApplication.errorResponse(.unauthorized, "unauthorized", "unknown API key"))
        }
        return .allowed(key.scope == .admin ? nil : key.bundleId)
    }

    static func validCustomerId(_ id: String) -> Bool {
        // Byte by byte: this runs on every request, cache hits included.
        (1...128).contains(id.utf8.count) && id.utf8.allSatisfy { byte in
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"): true
            case UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."), UInt8(ascii: "@"), UInt8(ascii: ":"): true
            default: false
            }
        }
    }

    func submit(_ request: Request, customerId: String) async -> Response {
        let app: String?
        switch authorize(request) {
        case .denied(let response): return response
        case .allowed(let bundle): app = bundle
        }
        guard Self.validCustomerId(customerId) else { return Self.invalidCustomerId(customerId) }
        let buffer: ByteBuffer
        switch await StorekeeperApplication.readBody(request) {
        case .success(let body): buffer = body
        case .failure(let refusal): return refusal.response
        }
        guard let body = try? JSONDecoder().decode(SubmitBody.self, from: Data(buffer.readableBytesView)),
            let jws = body.signedTransaction, !jws.isEmpty
        else {
            return StorekeeperApplication.errorResponse(.badRequest, "malformed-body", #"the body must be JSON {"signedTransaction": "<JWS>"}"#)
        }
        let verified: VerifiedSignedData<TransactionInfo>
        switch await verify(jws, forApp: app) {
        case .success(let transaction): verified = transaction
        case .failure(let refusal):
            metrics.recordVerificationFailure(code: refusal.code)
            return refusal.response
        }
        let outcome: SubmissionOutcome
        do {
            outcome = try await store.submit(verified, customerId: customerId)
        } catch {
            logger.error("transaction not stored", metadata: ["customer.id": .string(customerId), "error": .string(error.message)])
            return StorekeeperApplication.errorResponse(.serviceUnavailable, "storage-unavailable", "the transaction could not be stored; retry")
        }
        if case .refused(let conflict) = outcome {
            logger.notice(
                "transaction refused: \(conflict.code)",
                metadata: ["transaction.id": .string(verified.payload.transactionId), "customer.id": .string(customerId)]
            )
            return StorekeeperApplication.errorResponse(.conflict, conflict.code, conflict.message)
        }
        logger.info("transaction submitted", metadata: ["transaction.id": .string(verified.payload.transactionId), "customer.id": .string(customerId)])
        return await state(customerId, bundleId: verified.payload.bundleId, environment: verified.payload.environment ?? .production)
    }

    /// Verifies a submitted transaction with the verifier of the app and environment it names (unverified claims
    /// pick the verifier; the verifier checks them), so that the error reported is that check's: for an app key, the
    /// transaction must name the key's app.
    func verify(_ jws: String, forApp app: String?) async -> Result<VerifiedSignedData<TransactionInfo>, BodyRefusal> {
        let claims: AppClaims
        do {
            claims = try UnverifiedJWS.unsafeDecodePayload(jws, as: TransactionInfo.self).appClaims
        } catch {
            return .failure(BodyRefusal(status: .badRequest, code: error.code.rawValue, message: error.description))
        }
        let bundleId = claims.bundleId ?? ""
        guard AppClaims.isWellFormed(bundleId: bundleId) else {
            return .failure(BodyRefusal(
                status: .badRequest, code: VerificationError.Code.malformedPayload.rawValue,
                message: "malformed-payload: transaction.bundleId \(UntrustedText.quoted(bundleId, limit: 64)) is not a bundle ID"
            ))
        }
        if let app, bundleId != app {
            return .failure(BodyRefusal(
                status: .forbidden, code: VerificationError.Code.bundleIDMismatch.rawValue,
                message: "bundle-id-mismatch: transaction.bundleId \(UntrustedText.quoted(bundleId, limit: 64)) is not this API key's app '\(app)'"
            ))
        }
        guard let appConfiguration = configuration.apps.first(where: { $0.bundleId == bundleId }) else {
            return .failure(BodyRefusal(
                status: .forbidden, code: "unknown-app",
                message: "unknown-app: bundle ID \(UntrustedText.quoted(bundleId, limit: 64)) is not configured on this server"
            ))
        }
        // A transaction without an environment, or in one the app does not accept, is checked by the app's first
        // verifier, which says exactly that.
        let environment = claims.environment.flatMap { appConfiguration.environments.contains($0) ? $0 : nil } ?? appConfiguration.environments[0]
        guard let verifier = verifiers[VerifierKey(bundleId: bundleId, environment: environment)] else {
            return .failure(BodyRefusal(status: .forbidden, code: "unknown-app", message: "unknown-app: no verifier for '\(bundleId)'"))
        }
        do {
            return .success(try await verifier.verifyTransaction(jws))
        } catch {
            let status: HTTPResponse.Status = [.bundleIDMismatch, .environmentMismatch, .appAppleIDMismatch].contains(error.code) ? .forbidden : .badRequest
            return .failure(BodyRefusal(status: status, code: error.code.rawValue, message: error.description))
        }
    }

    func read(_ request: Request, customerId: String) async -> Response {
        let app: String?
        switch authorize(request) {
        case .denied(let response): return response
        case .allowed(let bundle): app = bundle
        }
        guard Self.validCustomerId(customerId) else { return Self.invalidCustomerId(customerId) }
        guard let bundleId = app ?? request.uri.queryParameters.get("bundleId") ?? configuration.apps.first?.bundleId,
            let appConfiguration = configuration.apps.first(where: { $0.bundleId == bundleId })
        else {
            return StorekeeperApplication.errorResponse(.badRequest, "unknown-app", "give bundleId for an admin key")
        }
        let requested = request.uri.queryParameters.get("environment").map(AppStoreEnvironment.init(rawValue:))
        let environment = requested ?? (appConfiguration.environments.contains(.production) ? .production : .sandbox)
        guard appConfiguration.environments.contains(environment) else {
            return StorekeeperApplication.errorResponse(
                .badRequest, "unknown-environment", "app '\(bundleId)' does not accept environment \(UntrustedText.quoted(environment.rawValue, limit: 64))"
            )
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
        var ledger: Ledger
        do {
            ledger = try await store.entitlementLedger(for: customerId, bundleId: bundleId, environment: environment)
        } catch {
            logger.error("customer read failed", metadata: ["customer.id": .string(customerId), "error": .string(error.message)])
            return StorekeeperApplication.errorResponse(.serviceUnavailable, "storage-unavailable", "the ledger could not be read")
        }
        ledger.transactions = ledger.transactions.filter { $0.value.info.bundleId == bundleId }
        ledger.consumableTotals = ledger.consumableTotals.filter { $0.key.bundleId == bundleId }
        // Known in this app and environment only: a purchase of the app is theirs there, or they own one of its
        // tokens there. Another app's customer, or the other environment's, is 404 like a customer nobody knows.
        let known = !ledger.consumableTotals.isEmpty || ledger.tokenOwners.values.contains(customerId)
            || ledger.transactions.values.contains { ledger.customer(of: $0) == customerId }
        guard known else {
            return StorekeeperApplication.errorResponse(.notFound, "unknown-customer", "no customer '\(customerId)' for \(bundleId) in \(environment)")
        }
        let at = now()
        let answer = CustomerView.answer(
            for: customerId, in: ledger, bundleId: bundleId, environment: environment, configuration: configuration.entitlements, at: at
        )
        cache.store(answer.body, customer: customerId, variant: variant, validUntil: answer.validUntil, now: at, ticket: ticket)
        return StorekeeperApplication.jsonResponse(encoded: answer.body)
    }
}
