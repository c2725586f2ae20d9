package import AppStoreModels
package import Foundation
package import Hummingbird
import StorekeeperHTTP

/// The simulator's control surface under `/simulator/v1/` (documented in the RunningTheSimulator article): create customers, buy,
/// change renewal settings, fail or fix billing, refund, share with families, move the clock, set faults, and read
/// the ground truth. Errors are `{"error": {"code", "message"}}` with 400, 404 or 409; a refused action changes
/// nothing.
package struct SimulatorControlAPI: Sendable {
    let simulator: Simulator
    /// Called after actions that may make notifications due, so they go out at once.
    let onChange: @Sendable () async -> Void
    /// Called at every stop of a clock advance and after every scenario step: returns once what is due then was
    /// attempted (``NotificationDeliverer/deliverDue()``). `onChange` unless given.
    let deliver: @Sendable () async -> Void

    package init(
        simulator: Simulator,
        onChange: @escaping @Sendable () async -> Void = {},
        deliver: (@Sendable () async -> Void)? = nil
    ) {
        self.simulator = simulator
        self.onChange = onChange
        self.deliver = deliver ?? onChange
    }

    package struct CustomerRequest: Codable, Sendable {
        package var id: String
        package var storefront: String?
    }
    struct EnabledRequest: Codable, Sendable { var enabled: Bool }
    struct BillingRequest: Codable, Sendable { var works: Bool }
    struct RefundRequest: Codable, Sendable {
        var reason: Int?
        var percentage: Int?
    }
    struct RefundAskRequest: Codable, Sendable { var reason: String }
    struct FamilyRequest: Codable, Sendable {
        var id: String
        var members: [String]
    }
    struct PriceIncreaseRequest: Codable, Sendable {
        var prices: [String: Int64]
        var consentRequired: Bool
    }
    struct ExtendRequest: Codable, Sendable { var days: Int }
    struct AdvanceRequest: Codable, Sendable {
        var seconds: Double?
        var days: Double?
        var to: Date?
    }
    struct ConfigRequest: Codable, Sendable {
        var notificationURL: String?
        var clockRunning: Bool?
    }
    struct ScenarioResult: Codable, Sendable {
        var events: [String]
        var now: Date
    }
    struct Clock: Codable, Sendable {
        var now: Date
        var renewalRate: RenewalRate
        var environment: AppStoreEnvironment
    }

    package func addRoutes(to router: Router<some RequestContext>) {
        let group = router.group("/simulator/v1")
        group.post("/customers") { request, context in
            try await act(request, context, status: .created) { (body: CustomerRequest, engine) throws(SimulatorError) in
                try engine.createCustomer(id: body.id, storefront: body.storefront ?? "USA")
            }
        }
        group.get("/customers/:id") { _, context in
            try await read { (engine) throws(SimulatorError) in
                try engine.groundTruth(customerId: context.parameters.get("id") ?? "")
            }
        }
        // The customer's app receipt (StoreKit 1), base64 as an app sends it.
        group.get("/customers/:id/receipt") { request, context in
            let bundleId = request.uri.queryParameters.get("bundleId")
            let id = context.parameters.get("id") ?? ""
            return try await read { (engine) throws(SimulatorError) in
                AppReceiptAnswer(
                    customerId: id, receiptData: Data(try engine.appReceipt(customerId: id, bundleId: bundleId)).base64EncodedString())
            }
        }
        // A transaction's StoreKit 1 transaction receipt.
        group.get("/transactions/:id/legacy-receipt") { _, context in
            let id = context.parameters.get("id") ?? ""
            return try await read { (engine) throws(SimulatorError) in
                ["transactionId": id, "transactionReceipt": try engine.legacyTransactionReceipt(transactionId: id)]
            }
        }
        group.post("/purchases") { request, context in
            try await act(request, context) { (body: LifecycleEngine.PurchaseRequest, engine) throws(SimulatorError) in
                try engine.purchase(body)
            }
        }
        group.post("/subscriptions/:id/auto-renew") { request, context in
            try await act(request, context) { (body: EnabledRequest, engine) throws(SimulatorError) in
                try engine.setAutoRenew(originalTransactionId: context.parameters.get("id") ?? "", enabled: body.enabled)
                return Self.ok
            }
        }
        group.post("/customers/:id/billing") { request, context in
            try await act(request, context) { (body: BillingRequest, engine) throws(SimulatorError) in
                try engine.setBilling(customerId: context.parameters.get("id") ?? "", works: body.works)
                return Self.ok
            }
        }
        group.post("/transactions/:id/refund") { request, context in
            try await act(request, context) { (body: RefundRequest, engine) throws(SimulatorError) in
                try engine.refund(
                    transactionId: context.parameters.get("id") ?? "", reason: RevocationReason(rawValue: body.reason ?? 0),
                    percentage: body.percentage
                )
                return Self.ok
            }
        }
        group.post("/transactions/:id/refund-request") { request, context in
            try await act(request, context) { (body: RefundAskRequest, engine) throws(SimulatorError) in
                try engine.requestRefund(transactionId: context.parameters.get("id") ?? "", reason: .init(rawValue: body.reason))
                return Self.ok
            }
        }
        idAction(group, "/transactions/:id/refund-decline") { (engine, id) throws(SimulatorError) in try engine.declineRefund(transactionId: id) }
        idAction(group, "/transactions/:id/refund-reversal") { (engine, id) throws(SimulatorError) in try engine.reverseRefund(transactionId: id) }
        idAction(group, "/transactions/:id/stop-sharing") { (engine, id) throws(SimulatorError) in try engine.stopSharing(transactionId: id) }
        group.post("/families") { request, context in
            try await act(request, context) { (body: FamilyRequest, engine) throws(SimulatorError) in
                try engine.formFamily(id: body.id, members: body.members)
                return Self.ok
            }
        }
        idAction(group, "/customers/:id/leave-family") { (engine, id) throws(SimulatorError) in try engine.leaveFamily(customerId: id) }
        group.post("/products/:id/price-increase") { request, context in
            try await act(request, context) { (body: PriceIncreaseRequest, engine) throws(SimulatorError) in
                try engine.announcePriceIncrease(
                    productId: context.parameters.get("id") ?? "", newPrices: body.prices, consentRequired: body.consentRequired
                )
                return Self.ok
            }
        }
        idAction(group, "/subscriptions/:id/price-consent") { (engine, id) throws(SimulatorError) in
            try engine.consentToPriceIncrease(originalTransactionId: id)
        }
        idAction(group, "/products/:id/remove-from-sale") { (engine, id) throws(SimulatorError) in try engine.removeFromSale(productId: id) }
        group.post("/subscriptions/:id/extend") { request, context in
            try await act(request, context) { (body: ExtendRequest, engine) throws(SimulatorError) in
                let result = try engine.extendRenewalDate(originalTransactionId: context.parameters.get("id") ?? "", days: body.days)
                return ["effectiveDate": result.effectiveDate]
            }
        }
        group.post("/clock/advance") { request, _ in
            // The clock moves one due time at a time, delivering at each (not one action: see Simulator.advance).
            let buffer = try await request.body.collect(upTo: 1 << 20)
            do {
                let body: AdvanceRequest
                do {
                    body = try AppStoreJSON.makeDecoder().decode(AdvanceRequest.self, from: Data(buffer.readableBytesView))
                } catch {
                    throw SimulatorError(.invalidRequest, "request body: \(Self.describe(error))")
                }
                // How far is checked where every advance goes (LifecycleEngine.checkAdvance): before year 10000, at
                // most 100 years at once.
                if let to = body.to {
                    guard body.seconds == nil, body.days == nil else {
                        throw SimulatorError(.invalidRequest, "give either to, or seconds and days, not both")
                    }
                    try await simulator.advance(to: to, deliver: deliver)
                } else {
                    let seconds = (body.seconds ?? 0) + (body.days ?? 0) * 86_400
                    guard seconds.isFinite, seconds >= 0.001 else {
                        throw SimulatorError(.invalidRequest, "give seconds, days or to (at least a millisecond forward)")
                    }
                    try await simulator.advance(by: seconds, deliver: deliver)
                }
                return try Self.json(
                    try await simulator.read { engine in
                        Clock(now: engine.state.now, renewalRate: engine.state.renewalRate, environment: engine.state.environment)
                    })
            } catch let error as SimulatorError {
                throw Self.error(error)
            }
        }
        group.get("/clock") { _, _ in
            try await read { engine in
                Clock(now: engine.state.now, renewalRate: engine.state.renewalRate, environment: engine.state.environment)
            }
        }
        group.get("/ground-truth") { _, _ in
            try await read { engine in engine.groundTruth() }
        }
        // The consumption information the developer sent for a transaction: the latest body, and how many were
        // accepted since the simulator started.
        group.get("/consumption-information/:id") { _, context in
            let id = context.parameters.get("id") ?? ""
            return try await read { engine in
                ConsumptionInformation(latest: engine.state.consumptionInformation[id], received: engine.consumptionInformationReceived[id] ?? 0)
            }
        }
        group.get("/faults") { _, _ in
            try await read { engine in engine.state.faults }
        }
        group.put("/faults") { request, context in
            try await act(request, context) { (body: FaultConfiguration, engine) throws(SimulatorError) in
                engine.state.faults = body
                return body
            }
        }
        group.put("/config") { request, context in
            try await act(request, context) { (body: ConfigRequest, engine) throws(SimulatorError) in
                if let url = body.notificationURL, URL(string: url)?.scheme?.hasPrefix("http") != true {
                    throw SimulatorError(.invalidRequest, "notificationURL must be an http(s) URL")
                }
                engine.state.notificationURL = body.notificationURL
                if let running = body.clockRunning { engine.state.clockRunning = running }
                return ConfigRequest(notificationURL: engine.state.notificationURL, clockRunning: engine.state.clockRunning)
            }
        }
        group.post("/scenarios") { request, _ in
            let buffer = try await request.body.collect(upTo: 1 << 20)
            do {
                let name = request.uri.queryParameters.get("name") ?? "scenario"
                let text = String(buffer: buffer)
                let scenario =
                    try ShippedScenarios.named(text.trimmingCharacters(in: .whitespacesAndNewlines))
                    ?? Scenario(name: name, text: text)
                let events = try await ScenarioRunner(simulator: simulator, afterStep: deliver).run(scenario)
                return try Self.json(
                    ScenarioResult(
                        events: events.map { "line \($0.line): \($0.description)" }, now: await simulator.now
                    ))
            } catch let error as SimulatorError {
                throw Self.error(error)
            }
        }
        group.get("/notifications") { _, _ in
            try await read { engine in
                engine.state.notifications.map {
                    NotificationSummary(
                        notificationUUID: $0.notificationUUID, notificationType: $0.notificationType, subtype: $0.subtype,
                        createdAt: $0.createdAt, customerId: $0.customerId, attempts: $0.sendAttempts.count,
                        lastResult: $0.sendAttempts.last?.sendAttemptResult, nextAttemptAt: $0.nextAttemptAt
                    )
                }
            }
        }
    }

    /// A notification as the control API lists it.
    package struct NotificationSummary: Codable, Sendable {
        package var notificationUUID: String
        package var notificationType: NotificationType
        package var subtype: NotificationSubtype?
        package var createdAt: Date
        package var customerId: String?
        package var attempts: Int
        package var lastResult: String?
        package var nextAttemptAt: Date?
    }

    struct Empty: Codable, Sendable {}
    static let ok = ["ok": true]

    // MARK: - Plumbing

    /// `POST path` (with an `:id` parameter and no body): `action` with the ID, answered `{"ok": true}`.
    private func idAction(
        _ group: RouterGroup<some RequestContext>, _ path: RouterPath,
        _ action: @escaping @Sendable (inout LifecycleEngine, String) throws(SimulatorError) -> Void
    ) {
        group.post(path) { request, context in
            try await act(request, context) { (_: Empty, engine) throws(SimulatorError) in
                try action(&engine, context.parameters.get("id") ?? "")
                return Self.ok
            }
        }
    }

    private func act<Body: Decodable & Sendable, Result: Encodable & Sendable>(
        _ request: Request,
        _ context: some RequestContext,
        status: HTTPResponse.Status = .ok,
        _ action: @Sendable (Body, inout LifecycleEngine) throws(SimulatorError) -> Result
    ) async throws -> Response {
        let buffer = try await request.body.collect(upTo: 1 << 20)
        let body: Body
        if Body.self == Empty.self && buffer.readableBytes == 0 {
            body = Empty() as! Body
        } else {
            do {
                body = try AppStoreJSON.makeDecoder().decode(Body.self, from: Data(buffer.readableBytesView))
            } catch {
                throw Self.error(SimulatorError(.invalidRequest, "request body: \(Self.describe(error))"))
            }
        }
        do {
            let result = try await simulator.perform { (engine) throws(SimulatorError) in try action(body, &engine) }
            await onChange()
            return try Self.json(result, status: status)
        } catch let error as SimulatorError {
            throw Self.error(error)
        }
    }

    private func read<Result: Encodable & Sendable>(
        _ body: @Sendable (LifecycleEngine) throws(SimulatorError) -> Result
    ) async throws -> Response {
        do {
            return try Self.json(try await simulator.read(body))
        } catch let error as SimulatorError {
            throw Self.error(error)
        }
    }

    static func json(_ value: some Encodable, status: HTTPResponse.Status = .ok) throws -> Response {
        let data = try AppStoreJSON.makeEncoder(prettyPrinted: true).encode(value)
        return Response(status: status, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: data)))
    }

    /// A refusal as the answer says it: ``APIError`` (shared with Storekeeper's own API), 400, 404, 409 or 500.
    static func error(_ error: SimulatorError) -> APIError {
        let status: HTTPResponse.Status =
            switch error.code {
            case .notFound: .notFound
            case .conflict: .conflict
            case .storage: .internalServerError
            default: .badRequest
            }
        return APIError(status, .init(rawValue: error.code.rawValue), error.message)
    }

    static func describe(_ error: any Error) -> String {
        guard let error = error as? DecodingError else { return "not valid JSON" }
        switch error {
        case .keyNotFound(let key, _): return "missing field '\(key.stringValue)'"
        case .typeMismatch(_, let context), .valueNotFound(_, let context):
            return "field '\(context.codingPath.map(\.stringValue).joined(separator: "."))' has the wrong type"
        case .dataCorrupted(let context):
            return context.codingPath.isEmpty
                ? "not valid JSON" : "field '\(context.codingPath.map(\.stringValue).joined(separator: "."))': \(context.debugDescription)"
        @unknown default: return "invalid"
        }
    }
}

/// `GET /simulator/v1/customers/{id}/receipt`'s answer.
struct AppReceiptAnswer: Codable, Sendable {
    var customerId: String
    /// Base64 of the DER receipt, as an app sends `Bundle.main.appStoreReceiptURL`'s bytes.
    var receiptData: String
}

/// `GET /simulator/v1/consumption-information/{transactionId}`'s answer.
struct ConsumptionInformation: Codable, Sendable {
    var latest: JSONValue?
    var received: Int
}
