import AppStoreModels
package import Foundation

/// Plays a ``Scenario`` on a ``Simulator``. Each step is one simulator action, but for `advance` steps, which move
/// the clock one due time at a time (``Simulator/advance(to:deliver:)``) so that renewals, deliveries and retries
/// each happen at their own virtual time; `expect` steps compare the simulator's ground truth and fail the run with
/// a message naming the line when they differ.
package struct ScenarioRunner: Sendable {
    package let simulator: Simulator
    /// Called after every step, and after every stop of an advance: delivers what is due (the server's deliverer).
    let afterStep: @Sendable () async -> Void

    package init(simulator: Simulator, afterStep: @escaping @Sendable () async -> Void = {}) {
        self.simulator = simulator
        self.afterStep = afterStep
    }

    /// What a step did, for the timeline.
    package struct Event: Sendable, Hashable {
        package var line: Int
        package var description: String
        package var clock: Date
    }

    /// Plays every step in order; stops at the first failure.
    @discardableResult
    package func run(_ scenario: Scenario) async throws(SimulatorError) -> [Event] {
        var events: [Event] = []
        for step in scenario.steps {
            let description = try await play(step, of: scenario.name)
            events.append(Event(line: step.line, description: description, clock: await simulator.now))
        }
        return events
    }

    /// Plays one step of the scenario `name`, then delivers what is due; returns what the step did. A failing
    /// step's error names the scenario, line and step.
    package func play(_ step: Scenario.Step, of name: String = "scenario") async throws(SimulatorError) -> String {
        do throws(SimulatorError) {
            if let target = try await Self.clockTarget(of: step, now: simulator.now) {
                try await simulator.advance(to: target, deliver: afterStep)
                return Self.describeAdvance(step)
            }
            let description = try await simulator.perform { (engine) throws(SimulatorError) in try Self.apply(step, to: &engine) }
            await afterStep()
            return description
        } catch {
            var located = error
            located.message = "\(name):\(step.line): \(step.verb): \(error.message)"
            throw located
        }
    }

    /// Where an `advance` or `advance-to` step moves the clock; `nil` for other steps.
    static func clockTarget(of step: Scenario.Step, now: Date) throws(SimulatorError) -> Date? {
        let a = step.arguments
        switch step.verb {
        case "advance":
            guard let seconds = Scenario.duration(a[0]) else {
                throw SimulatorError(.invalidRequest, "'\(a[0])' is not a duration like 90s, 5m, 2h or 31d")
            }
            return now.addingTimeInterval(seconds)
        case "advance-to":
            guard let date = try? Date(a[0], strategy: .iso8601) else {
                throw SimulatorError(.invalidRequest, "'\(a[0])' is not an ISO-8601 date")
            }
            return date
        default:
            return nil
        }
    }

    static func describeAdvance(_ step: Scenario.Step) -> String {
        step.verb == "advance" ? "clock +\(step.arguments[0])" : "clock → \(step.arguments[0])"
    }

    /// Plays one step on an engine; returns what it did, for a timeline.
    package static func apply(_ step: Scenario.Step, to engine: inout LifecycleEngine) throws(SimulatorError) -> String {
        let a = step.arguments
        switch step.verb {
        case "customer":
            try engine.createCustomer(id: a[0], storefront: a.count > 1 ? a[1] : "USA")
            return "customer \(a[0])"
        case "family":
            try engine.formFamily(id: a[0], members: Array(a.dropFirst()))
            return "family \(a[0]): \(a.dropFirst().joined(separator: ", "))"
        case "buy":
            let token = try step.options["token"].map { (text) throws(SimulatorError) -> LowercaseUUID in
                guard let token = LowercaseUUID(uuidString: text) else {
                    throw SimulatorError(.invalidRequest, "token=\(text) is not a UUID")
                }
                return token
            }
            let quantity = Int(step.options["quantity"] ?? "1") ?? 0
            var request = LifecycleEngine.PurchaseRequest(
                customerId: a[0], productId: a[1], quantity: quantity, appAccountToken: token, offerId: step.options["offer"])
            request.offerSignature = try engine.scenarioOfferSignature(for: request)
            let result = try engine.purchase(request)
            return "\(a[0]) buys \(a[1]): \(result.outcome), transaction \(result.transactionId)"
        case "advance", "advance-to":
            // On a bare engine the advance is one action; ``play(_:of:)`` steps through it on a simulator.
            try engine.advance(to: try clockTarget(of: step, now: engine.state.now)!)
            return describeAdvance(step)
        case "auto-renew":
            guard a[2] == "on" || a[2] == "off" else { throw SimulatorError(.invalidRequest, "auto-renew takes on or off") }
            try engine.setAutoRenew(originalTransactionId: try subscription(a[0], a[1], engine), enabled: a[2] == "on")
            return "\(a[0]) turns auto-renew \(a[2]) for \(a[1])"
        case "billing":
            guard a[1] == "fail" || a[1] == "fix" else { throw SimulatorError(.invalidRequest, "billing takes fail or fix") }
            try engine.setBilling(customerId: a[0], works: a[1] == "fix")
            return "\(a[0])'s billing: \(a[1])"
        case "refund":
            let percent = try step.options["percent"].map { (text) throws(SimulatorError) -> Int in
                guard let value = Int(text) else { throw SimulatorError(.invalidRequest, "percent=\(text) is not a number") }
                return value
            }
            try engine.refund(
                transactionId: try transaction(a[0], a[1], engine),
                reason: RevocationReason(rawValue: Int(step.options["reason"] ?? "0") ?? 0), percentage: percent
            )
            return "refund of \(a[0])'s \(a[1])"
        case "request-refund":
            try engine.requestRefund(transactionId: try transaction(a[0], a[1], engine), reason: .init(rawValue: a[2]))
            return "\(a[0]) asks for a refund of \(a[1])"
        case "decline-refund":
            try engine.declineRefund(transactionId: try transaction(a[0], a[1], engine))
            return "refund of \(a[0])'s \(a[1]) declined"
        case "reverse-refund":
            try engine.reverseRefund(transactionId: try transaction(a[0], a[1], engine, revoked: true))
            return "refund of \(a[0])'s \(a[1]) reversed"
        case "price-increase":
            var prices: [String: Int64] = [:]
            var consent: Bool? = nil
            for word in a.dropFirst() {
                if word == "consent" || word == "no-consent" {
                    consent = word == "consent"
                } else if let equals = word.firstIndex(of: "="), let price = Int64(word[word.index(after: equals)...]) {
                    prices[String(word[..<equals])] = price
                } else {
                    throw SimulatorError(.invalidRequest, "'\(word)' is neither STOREFRONT=PRICE nor consent/no-consent")
                }
            }
            guard let consent else { throw SimulatorError(.invalidRequest, "say consent or no-consent") }
            try engine.announcePriceIncrease(productId: a[0], newPrices: prices, consentRequired: consent)
            return "price increase for \(a[0])"
        case "consent":
            try engine.consentToPriceIncrease(originalTransactionId: try subscription(a[0], a[1], engine))
            return "\(a[0]) consents to the price increase"
        case "remove-from-sale":
            try engine.removeFromSale(productId: a[0])
            return "\(a[0]) removed from sale"
        case "extend":
            guard let days = Int(a[2]) else { throw SimulatorError(.invalidRequest, "'\(a[2])' is not a number of days") }
            _ = try engine.extendRenewalDate(originalTransactionId: try subscription(a[0], a[1], engine), days: days)
            return "\(a[0])'s \(a[1]) extended by \(days) days"
        case "leave-family":
            try engine.leaveFamily(customerId: a[0])
            return "\(a[0]) leaves the family"
        case "stop-sharing":
            try engine.stopSharing(transactionId: try transaction(a[0], a[1], engine))
            return "\(a[0]) stops sharing \(a[1])"
        case "test-notification":
            _ = try engine.requestTestNotification(bundleId: a[0])
            return "TEST notification"
        case "expect":
            let truth = try engine.groundTruth(customerId: a[0])
            let actual = truth.entitlements.map(\.productId).sorted()
            let expected = Array(a.dropFirst()).sorted()
            guard actual == expected else {
                throw SimulatorError(
                    .conflict, "expected \(a[0]) to have [\(expected.joined(separator: ", "))], has [\(actual.joined(separator: ", "))]"
                )
            }
            return "\(a[0]) has [\(actual.joined(separator: ", "))]"
        case "expect-balance":
            let balance = try engine.groundTruth(customerId: a[0]).consumableBalance[a[1]] ?? 0
            guard Int(a[2]) == balance else {
                throw SimulatorError(.conflict, "expected \(a[0]) to hold \(a[2]) of \(a[1]), holds \(balance)")
            }
            return "\(a[0]) holds \(balance) of \(a[1])"
        default:
            throw SimulatorError(.invalidRequest, "unknown step '\(step.verb)'")
        }
    }

    /// The customer's subscription in the product's group.
    static func subscription(_ customer: String, _ product: String, _ engine: LifecycleEngine) throws(SimulatorError) -> String {
        let group = engine.catalog.product(product)?.subscriptionGroupId
        guard
            let subscription = engine.state.subscriptions.records(of: customer).first(where: {
                $0.groupId == group && $0.ownership == .purchased
            })
        else { throw SimulatorError(.notFound, "\(customer) has no subscription in \(product)'s group") }
        return subscription.originalTransactionId
    }

    /// The customer's latest transaction of the product (for subscriptions: the current period's).
    static func transaction(_ customer: String, _ product: String, _ engine: LifecycleEngine, revoked: Bool = false) throws(SimulatorError) -> String
    {
        let group = engine.catalog.product(product)?.subscriptionGroupId
        let candidates = engine.state.transactions.records(of: customer).filter { record in
            record.info.inAppOwnershipType != .familyShared
                && (record.info.productId == product || (group != nil && record.info.subscriptionGroupIdentifier == group))
                && (record.info.revocationDate != nil) == revoked
        }
        guard let latest = candidates.max(by: { ($0.info.purchaseDate, $0.info.transactionId) < ($1.info.purchaseDate, $1.info.transactionId) })
        else {
            throw SimulatorError(.notFound, "\(customer) has no\(revoked ? " refunded" : "") transaction of \(product)")
        }
        return latest.info.transactionId
    }
}
