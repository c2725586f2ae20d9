import AppStoreModels
import AppStoreSigning
import Foundation
package import Hummingbird

/// The App Store Server API at Apple's paths (APPSTORE-SPEC §1.3), served by the simulator: JWT checked like
/// Apple (ES256 with the registered key, `aud`, `bid`, lifetime at most 60 minutes, else 401), Apple's error bodies
/// and codes, 20 items per page with `revision`/`paginationToken`.
package struct SimulatorAPI: Sendable {
    let simulator: Simulator

    package init(simulator: Simulator) {
        self.simulator = simulator
    }

    /// Whether a notification URL is configured (Request a Test Notification answers 4040007 without one).
    func hasNotificationURL() async -> Bool {
        await simulator.hasNotificationURL
    }

    static let pageSize = 20

    /// Adds the `/inApps` routes: every endpoint of ``AppStoreEndpoint/all``, with the handler that answers it.
    package func addRoutes(to router: Router<some RequestContext>) {
        for endpoint in AppStoreEndpoint.all {
            guard let method = HTTPRequest.Method(endpoint.method.rawValue) else { continue }
            router.on(RouterPath(endpoint.pattern), method: method) { request, context in
                await handle(endpoint, request, context) { bundleId in try await answer(endpoint, request, context, bundleId) }
            }
        }
    }

    /// The handler of each endpoint.
    func answer(_ endpoint: AppStoreEndpoint, _ request: Request, _ context: some RequestContext, _ bundleId: String) async throws -> Response {
        switch endpoint {
        case .getAppTransactionInfo: try await getAppTransaction(context, bundleId)
        case .getTransactionInfo: try await getTransaction(context, bundleId)
        case .finishTransaction: try await finishTransaction(context, bundleId)
        case .setAppAccountToken: try await setAppAccountToken(request, context, bundleId)
        case .getTransactionHistoryV2: try await history(request, context, bundleId, version: 2)
        case .getTransactionHistoryV1: try await history(request, context, bundleId, version: 1)
        case .getAllSubscriptionStatuses: try await statuses(request, context, bundleId)
        case .getRefundHistory: try await refundHistory(request, context, bundleId)
        case .getRefundHistoryV1: try await refundLookupV1(context, bundleId)
        case .lookUpOrderID: try await lookUpOrder(context, bundleId)
        case .extendRenewalDate: try await extend(request, context, bundleId)
        case .extendRenewalDatesForAll: try await massExtend(request, context, bundleId)
        case .getRenewalExtensionStatus: try await massExtendStatus(context, bundleId)
        case .sendConsumptionInformation: try await consumption(request, context, bundleId, version: 2)
        case .sendConsumptionInformationV1: try await consumption(request, context, bundleId, version: 1)
        case .getNotificationHistory: try await notificationHistory(request, context, bundleId)
        case .requestTestNotification: try await requestTestNotification(bundleId)
        case .getTestNotificationStatus: try await testNotificationStatus(context, bundleId)
        default: throw AppStoreAPIError.generalInternal
        }
    }

    // MARK: - Authentication and errors

    /// Authenticates, runs the handler, and turns errors into Apple's answers.
    func handle(
        _ endpoint: AppStoreEndpoint,
        _ request: Request,
        _ context: some RequestContext,
        _ body: (String) async throws -> Response
    ) async -> Response {
        let bundleId: String
        do {
            bundleId = try await authenticate(request)
        } catch {
            return Response(
                status: .unauthorized, headers: [.contentType: "text/plain"],
                body: .init(byteBuffer: ByteBuffer(string: "Unauthenticated\n\nRequest ID: \(UUID().uuidString)\n"))
            )
        }
        let (fault, latency) = await simulator.admitAPIRequest(bundleId: bundleId, family: endpoint.family)
        if latency > 0 { try? await Task.sleep(for: .milliseconds(latency)) }
        if let fault { return fault.response() }
        do {
            return try await body(bundleId)
        } catch let error as AppStoreAPIError {
            return error.response()
        } catch let error as SimulatorError {
            return AppStoreAPIError.from(error, fallback: .generalBadRequest).response()
        } catch {
            return AppStoreAPIError.generalInternal.response()
        }
    }

    struct Unauthenticated: Error {}

    /// The bearer token's `bid` after the token passes Apple's checks, or 401.
    func authenticate(_ request: Request) async throws -> String {
        guard let authorization = request.headers[.authorization], authorization.hasPrefix("Bearer ") else {
            throw Unauthenticated()
        }
        guard let key = simulator.apiKey, let publicKey = simulator.apiPublicKey else { throw Unauthenticated() }
        let token = String(authorization.dropFirst("Bearer ".count))
        let claims = try APIAuthToken.verify(token, keyID: key.keyId, issuerID: key.issuerId, publicKey: publicKey)
        guard try await simulator.read({ $0.catalog.app(claims.bid) != nil }) else { throw Unauthenticated() }
        return claims.bid
    }

    // MARK: - Helpers

    /// A transaction ID from the path (`:transactionId` or `:originalTransactionId`): digits only, else 4000006.
    static func transactionId(_ context: some RequestContext) throws -> String {
        guard let id = context.parameters.get("transactionId") ?? context.parameters.get("originalTransactionId"), APIRequestRules.isTransactionId(id)
        else {
            throw AppStoreAPIError.invalidTransactionId
        }
        return id
    }

    static func json(_ value: some Encodable, status: HTTPResponse.Status = .ok) throws -> Response {
        let data = try AppStoreJSON.makeEncoder().encode(value)
        return Response(
            status: status, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: data))
        )
    }

    static func body<T: Decodable>(_ request: Request, as type: T.Type) async throws -> T {
        let buffer: ByteBuffer
        do {
            buffer = try await request.body.collect(upTo: 1 << 20)
        } catch {
            throw AppStoreAPIError.generalBadRequest
        }
        do {
            return try JSONDecoder().decode(type, from: Data(buffer.readableBytesView))
        } catch {
            throw AppStoreAPIError.generalBadRequest
        }
    }

    /// The customer of any transaction ID within the app, or 404 (4040010).
    func customer(of id: String, _ bundleId: String) async throws -> String {
        guard let customer = try await simulator.read({ $0.customerId(forAnyTransactionId: id, bundleId: bundleId) }) else {
            throw AppStoreAPIError.transactionIdNotFound
        }
        return customer
    }

    // MARK: - Transactions

    func getTransaction(_ context: some RequestContext, _ bundleId: String) async throws -> Response {
        let id = try Self.transactionId(context)
        let signed = try await simulator.read { (engine) throws(SimulatorError) -> String? in
            if engine.isAppTransactionId(id, bundleId: bundleId) { return "" }
            guard engine.state.transactions[id]?.info.bundleId == bundleId else { return nil }
            return try engine.signTransaction(id)
        }
        guard let signed else { throw AppStoreAPIError.transactionIdNotFound }
        guard !signed.isEmpty else { throw AppStoreAPIError.appTransactionIdNotSupported }
        return try Self.json(TransactionInfoResponse(signedTransactionInfo: signed))
    }

    func getAppTransaction(_ context: some RequestContext, _ bundleId: String) async throws -> Response {
        let id = try Self.transactionId(context)
        let customer = try await customer(of: id, bundleId)
        let signed = try await simulator.read { (engine) throws(SimulatorError) in
            try engine.signedAppTransaction(customerId: customer, bundleId: bundleId)
        }
        guard let signed else {
            throw AppStoreAPIError.appTransactionDoesNotExist
        }
        return try Self.json(AppTransactionInfoResponse(signedAppTransactionInfo: signed))
    }

    func finishTransaction(_ context: some RequestContext, _ bundleId: String) async throws -> Response {
        let id = try Self.transactionId(context)
        try await requireOwnTransaction(id, bundleId)
        try await simulator.perform { (engine) throws(SimulatorError) in try engine.finishTransaction(id) }
        return Response(status: .ok)
    }

    /// 400 for an app transaction ID, 404 for another app's or an unknown transaction.
    func requireOwnTransaction(_ id: String, _ bundleId: String) async throws {
        let (isApp, owned) = try await simulator.read { engine in
            (engine.isAppTransactionId(id, bundleId: bundleId), engine.state.transactions[id]?.info.bundleId == bundleId)
        }
        if isApp { throw AppStoreAPIError.appTransactionIdNotSupported }
        guard owned else { throw AppStoreAPIError.transactionIdNotFound }
    }

    func setAppAccountToken(_ request: Request, _ context: some RequestContext, _ bundleId: String) async throws -> Response {
        let id = try Self.transactionId(context)
        let body = try await Self.body(request, as: AppAccountTokenBody.self)
        guard let text = body.appAccountToken, let token = LowercaseUUID(uuidString: text) else {
            throw AppStoreAPIError.invalidAppAccountTokenUUID
        }
        let (isApp, owned) = try await simulator.read { engine in
            (engine.isAppTransactionId(id, bundleId: bundleId), engine.state.transactions[id]?.info.bundleId == bundleId)
        }
        if isApp { throw AppStoreAPIError.appTransactionIdNotSupported }
        guard owned else { throw AppStoreAPIError.originalTransactionIdNotFound }
        try await simulator.perform { (engine) throws(SimulatorError) in
            try engine.setAppAccountToken(originalTransactionId: id, token: token)
        }
        return Response(status: .ok)
    }

    // MARK: - Subscriptions

    func statuses(_ request: Request, _ context: some RequestContext, _ bundleId: String) async throws -> Response {
        let id = try Self.transactionId(context)
        var wanted: Set<Int>? = nil
        let values = request.uri.queryParameters.getAll("status")
        if !values.isEmpty {
            let parsed = values.compactMap { Int($0) }.filter { (1...5).contains($0) }
            guard parsed.count == values.count else { throw AppStoreAPIError.invalidStatus }
            wanted = Set(parsed)
        }
        let customer = try await customer(of: id, bundleId)
        let response = try await simulator.read { (engine) throws(SimulatorError) -> StatusResponse in
            var groups: [String: [StatusResponse.LastTransactionsItem]] = [:]
            for subscription in engine.subscriptions(customerId: customer, bundleId: bundleId)
            where wanted?.contains(subscription.status.rawValue) ?? true {
                groups[subscription.groupId, default: []].append(
                    .init(
                        status: subscription.status, originalTransactionId: subscription.originalTransactionId,
                        signedTransactionInfo: try engine.signTransaction(subscription.latestTransactionId),
                        signedRenewalInfo: try engine.signedRenewalInfo(originalTransactionId: subscription.originalTransactionId)
                    )
                )
            }
            return StatusResponse(
                environment: engine.state.environment, bundleId: bundleId,
                appAppleId: engine.catalog.app(bundleId)?.appAppleId ?? 0,
                data: groups.keys.sorted().map { .init(subscriptionGroupIdentifier: $0, lastTransactions: groups[$0]!) }
            )
        }
        return try Self.json(response)
    }

    /// Request bodies as clients send them, every field optional so that a missing one gets Apple's error code.
    struct AppAccountTokenBody: Decodable { var appAccountToken: String? }
    struct ExtendBody: Decodable {
        var extendByDays: Int?
        var extendReasonCode: Int?
        var requestIdentifier: String?
    }

    func lookUpOrder(_ context: some RequestContext, _ bundleId: String) async throws -> Response {
        guard let orderId = context.parameters.get("orderId"), !orderId.isEmpty else { throw AppStoreAPIError.generalBadRequest }
        let signed = try await simulator.read { (engine) throws(SimulatorError) -> [String]? in
            guard engine.state.environment == .production else { return nil }
            guard orderId.count <= 64, orderId.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber) }) else {
                throw SimulatorError(.invalidRequest, "invalid order ID", apiErrorCode: 4_000_000)
            }
            return try engine.state.transactions.records(withKey: .order(orderId))
                .filter { $0.info.bundleId == bundleId }
                .sorted { $0.info.transactionId < $1.info.transactionId }
                .map { (record) throws(SimulatorError) in try engine.signTransaction(record.info.transactionId) }
        }
        guard let signed else {
            // Look Up Order ID has no sandbox URL.
            return Response(status: .notFound)
        }
        return try Self.json(OrderLookupResponse(status: signed.isEmpty ? 1 : 0, signedTransactions: signed.isEmpty ? nil : signed))
    }

    func extend(_ request: Request, _ context: some RequestContext, _ bundleId: String) async throws -> Response {
        guard let id = context.parameters.get("originalTransactionId"), APIRequestRules.isTransactionId(id) else {
            throw AppStoreAPIError.invalidOriginalTransactionId
        }
        let body = try await Self.body(request, as: ExtendBody.self)
        guard let days = body.extendByDays, APIRequestRules.extendByDays.contains(days) else { throw AppStoreAPIError.invalidExtendByDays }
        guard let reason = body.extendReasonCode, APIRequestRules.extendReasonCodes.contains(reason) else {
            throw AppStoreAPIError.invalidExtendReasonCode
        }
        guard let requestId = body.requestIdentifier, APIRequestRules.isRequestIdentifier(requestId) else {
            throw AppStoreAPIError.invalidRequestIdentifier
        }
        let owned = try await simulator.read { $0.state.subscriptions[id]?.bundleId == bundleId }
        guard owned else { throw AppStoreAPIError.originalTransactionIdNotFound }
        let result = try await simulator.perform { (engine) throws(SimulatorError) in
            try engine.extendRenewalDate(originalTransactionId: id, days: days)
        }
        return try Self.json(
            ExtendRenewalDateResponse(
                originalTransactionId: id, webOrderLineItemId: result.webOrderLineItemId, success: true,
                effectiveDate: result.effectiveDate
            )
        )
    }
}

extension Character {
    var isASCIIDigit: Bool { isASCII && isNumber }
}
