package import AppStoreModels
package import Foundation

/// How an app answers Apple's `CONSUMPTION_REQUEST` notifications (a customer asked for a refund; Apple asks the
/// developer what it knows, within 12 hours): by rules over what the ledger knows of the customer and the purchase,
/// by a person through the support API (`manual`, the default), or not at all (`off`).
///
/// The customer's consent is not a rule: Apple accepts consumption information only when the customer consented
/// (`customerConsented` must be `true`) and asks for no answer otherwise, so a customer who has not consented in the
/// app (`PUT /v1/customers/{id}/consumption-consent`) gets no answer whatever the rules say.
package struct ConsumptionPolicy: Codable, Hashable, Sendable {
    package enum Mode: String, Codable, Hashable, Sendable, CaseIterable {
        /// The first rule that matches decides; ``otherwise`` when none does.
        case rules
        /// Every request waits for a person (the support API shows its deadline).
        case manual
        /// Requests are recorded and never answered.
        case off

        package init(from decoder: any Decoder) throws {
            let text = try decoder.singleValueContainer().decode(String.self)
            guard let mode = Mode(rawValue: text) else {
                throw DecodingError.dataCorrupted(
                    .init(
                        codingPath: decoder.codingPath,
                        debugDescription: "\(UntrustedText.quoted(text, limit: 32)) is not a policy: give \"rules\", \"manual\" or \"off\""))
            }
            self = mode
        }
    }

    /// What a rule (or ``otherwise``) does with a request.
    package enum Outcome: Hashable, Sendable, Codable {
        /// Send this consumption information.
        case answer(ConsumptionAnswer)
        /// Leave it to a person.
        case manual
        /// Send nothing (Apple decides without the developer's facts).
        case noAnswer

        package init(from decoder: any Decoder) throws {
            let container = try decoder.singleValueContainer()
            if let word = try? container.decode(String.self) {
                switch word {
                case "manual": self = .manual
                case "none": self = .noAnswer
                default:
                    throw DecodingError.dataCorrupted(
                        .init(
                            codingPath: decoder.codingPath,
                            debugDescription:
                                "\(UntrustedText.quoted(word, limit: 32)) is not an outcome: give \"manual\", \"none\" or an answer object"))
                }
                return
            }
            self = .answer(try container.decode(ConsumptionAnswer.self))
        }

        package func encode(to encoder: any Encoder) throws {
            var container = encoder.singleValueContainer()
            switch self {
            case .answer(let answer): try container.encode(answer)
            case .manual: try container.encode("manual")
            case .noAnswer: try container.encode("none")
            }
        }
    }

    /// One rule: when every condition given holds, its outcome decides.
    package struct Rule: Codable, Hashable, Sendable {
        /// Shown in the audit log and the support API ("rules[1]" when absent: its place in the configuration).
        package var name: String?
        package var when: Conditions
        package var then: Outcome

        package init(name: String? = nil, when: Conditions, then: Outcome) {
            self.name = name
            self.when = when
            self.then = then
        }
    }

    /// A rule's conditions; a condition left out always holds. A condition on a fact the ledger does not have (how
    /// much of a consumable was used) does not hold.
    package struct Conditions: Codable, Hashable, Sendable {
        /// Apple's product types: `Consumable`, `Non-Consumable`, `Auto-Renewable Subscription`, `Non-Renewing Subscription`.
        package var productTypes: [ProductType]?
        package var productIds: [String]?
        /// `UNINTENDED_PURCHASE`, `FULFILLMENT_ISSUE`, `UNSATISFIED_WITH_PURCHASE`, `LEGAL`, `OTHER`.
        package var reasons: [ConsumptionRequestReason]?
        /// Days since the customer's first purchase in the app and environment.
        package var minTenureDays: Int?
        package var maxTenureDays: Int?
        /// Purchases of the customer refunded before this request (this one not counted).
        package var minRefunds: Int?
        package var maxRefunds: Int?
        /// How much of the purchase was used, in percent: the part of a subscription's period (auto-renewable or
        /// non-renewing) that had passed when the refund was asked for.
        package var minConsumedPercent: Double?
        package var maxConsumedPercent: Double?

        package init(
            productTypes: [ProductType]? = nil, productIds: [String]? = nil, reasons: [ConsumptionRequestReason]? = nil,
            minTenureDays: Int? = nil, maxTenureDays: Int? = nil, minRefunds: Int? = nil, maxRefunds: Int? = nil,
            minConsumedPercent: Double? = nil, maxConsumedPercent: Double? = nil
        ) {
            self.productTypes = productTypes
            self.productIds = productIds
            self.reasons = reasons
            self.minTenureDays = minTenureDays
            self.maxTenureDays = maxTenureDays
            self.minRefunds = minRefunds
            self.maxRefunds = maxRefunds
            self.minConsumedPercent = minConsumedPercent
            self.maxConsumedPercent = maxConsumedPercent
        }

        /// Whether every condition given holds for `facts`.
        package func hold(for facts: ConsumptionFacts) -> Bool {
            if let productTypes, !productTypes.contains(facts.productType) { return false }
            if let productIds, !productIds.contains(facts.productId) { return false }
            if let reasons, !(facts.reason.map(reasons.contains) ?? false) { return false }
            if let minTenureDays, facts.tenureDays < minTenureDays { return false }
            if let maxTenureDays, facts.tenureDays > maxTenureDays { return false }
            if let minRefunds, facts.refunds < minRefunds { return false }
            if let maxRefunds, facts.refunds > maxRefunds { return false }
            if minConsumedPercent != nil || maxConsumedPercent != nil {
                guard let consumed = facts.consumedPercent else { return false }
                if let minConsumedPercent, consumed < minConsumedPercent { return false }
                if let maxConsumedPercent, consumed > maxConsumedPercent { return false }
            }
            return true
        }
    }

    package var policy: Mode
    package var rules: [Rule]
    /// What happens when no rule matches (default `manual`).
    package var otherwise: Outcome

    package init(policy: Mode = .manual, rules: [Rule] = [], otherwise: Outcome = .manual) {
        self.policy = policy
        self.rules = rules
        self.otherwise = otherwise
    }

    private enum CodingKeys: String, CodingKey { case policy, rules, otherwise }

    package init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.init(
            policy: try container.decodeIfPresent(Mode.self, forKey: .policy) ?? .manual,
            rules: try container.decodeIfPresent([Rule].self, forKey: .rules) ?? [],
            otherwise: try container.decodeIfPresent(Outcome.self, forKey: .otherwise) ?? .manual)
    }

    /// What the policy does with a request whose facts are `facts`, and what decided it (`rule 2 (name)`,
    /// `otherwise`, `policy manual`, `policy off`, `not consented`).
    package func decide(_ facts: ConsumptionFacts) -> (outcome: Outcome, decidedBy: String) {
        // Before anything else: without consent nothing may be sent, by a rule or by a person.
        if policy == .off { return (.noAnswer, "policy off") }
        guard facts.consented else { return (.noAnswer, "not consented") }
        if policy == .manual { return (.manual, "policy manual") }
        for (index, rule) in rules.enumerated() where rule.when.hold(for: facts) {
            return (rule.then, "rules[\(index)]" + (rule.name.map { " (\($0))" } ?? ""))
        }
        return (otherwise, "otherwise")
    }

    /// What is wrong with the policy, in words (empty when nothing is): answers Apple would refuse whatever the
    /// request, and bounds that cannot both hold.
    package func problems() -> [String] {
        var problems: [String] = []
        func check(_ outcome: Outcome, _ place: String) {
            if case .answer(let answer) = outcome, let problem = answer.problem() { problems.append("\(place): \(problem)") }
        }
        for (index, rule) in rules.enumerated() {
            let place = "rules[\(index)]"
            check(rule.then, place + ".then")
            let when = rule.when
            if let low = when.minTenureDays, let high = when.maxTenureDays, low > high {
                problems.append("\(place): minTenureDays is above maxTenureDays")
            }
            if let low = when.minRefunds, let high = when.maxRefunds, low > high { problems.append("\(place): minRefunds is above maxRefunds") }
            for (name, value) in [
                ("minTenureDays", when.minTenureDays), ("maxTenureDays", when.maxTenureDays), ("minRefunds", when.minRefunds),
                ("maxRefunds", when.maxRefunds),
            ] {
                if let value, value < 0 { problems.append("\(place): \(name) is negative") }
            }
            for (name, value) in [("minConsumedPercent", when.minConsumedPercent), ("maxConsumedPercent", when.maxConsumedPercent)] {
                if let value, !(0...100).contains(value) { problems.append("\(place): \(name) must be from 0 to 100") }
            }
            if let low = when.minConsumedPercent, let high = when.maxConsumedPercent, low > high {
                problems.append("\(place): minConsumedPercent is above maxConsumedPercent")
            }
            for (name, list) in [
                ("productTypes", when.productTypes?.map(\.rawValue)), ("productIds", when.productIds), ("reasons", when.reasons?.map(\.rawValue)),
            ] {
                if let list, list.isEmpty { problems.append("\(place): \(name) is empty (no request would match; leave it out to match any)") }
            }
            for type in when.productTypes ?? [] where !ProductType.knownValues.contains(type) {
                problems.append(
                    "\(place): \(UntrustedText.quoted(type.rawValue, limit: 40)) is not a product type (give \(ProductType.knownValues.map { "\"\($0.rawValue)\"" }.joined(separator: ", ")))"
                )
            }
            for reason in when.reasons ?? [] where !ConsumptionRequestReason.knownValues.contains(reason) {
                problems.append(
                    "\(place): \(UntrustedText.quoted(reason.rawValue, limit: 40)) is not a reason (give \(ConsumptionRequestReason.knownValues.map { "\"\($0.rawValue)\"" }.joined(separator: ", ")))"
                )
            }
        }
        check(otherwise, "otherwise")
        if policy != .rules, !rules.isEmpty {
            problems.append("rules are given but policy is \"\(policy.rawValue)\": set \"policy\": \"rules\" for them to apply")
        }
        return problems
    }
}

/// The consumption information a policy or a person sends (Send Consumption Information v2's fields but
/// `customerConsented`, which is always `true`: nothing is sent without consent).
package struct ConsumptionAnswer: Codable, Hashable, Sendable {
    package var deliveryStatus: DeliveryStatus
    package var sampleContentProvided: Bool
    package var refundPreference: RefundPreference?
    /// Milliunits (50 % is 50000); never sent for an auto-renewable subscription (Apple computes it from time).
    package var consumptionPercentage: Int?

    package init(
        deliveryStatus: DeliveryStatus, sampleContentProvided: Bool = false, refundPreference: RefundPreference? = nil,
        consumptionPercentage: Int? = nil
    ) {
        self.deliveryStatus = deliveryStatus
        self.sampleContentProvided = sampleContentProvided
        self.refundPreference = refundPreference
        self.consumptionPercentage = consumptionPercentage
    }

    private enum CodingKeys: String, CodingKey { case deliveryStatus, sampleContentProvided, refundPreference, consumptionPercentage }

    package init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.init(
            deliveryStatus: try container.decode(DeliveryStatus.self, forKey: .deliveryStatus),
            sampleContentProvided: try container.decodeIfPresent(Bool.self, forKey: .sampleContentProvided) ?? false,
            refundPreference: try container.decodeIfPresent(RefundPreference.self, forKey: .refundPreference),
            consumptionPercentage: try container.decodeIfPresent(Int.self, forKey: .consumptionPercentage))
    }

    /// Why Apple would refuse this answer for any purchase (its rules for Send Consumption Information v2), in
    /// words; nil when it would not.
    package func problem() -> String? {
        guard DeliveryStatus.knownValues.contains(deliveryStatus) else {
            return
                "deliveryStatus \(UntrustedText.quoted(deliveryStatus.rawValue, limit: 40)) is not one of \(DeliveryStatus.knownValues.map(\.rawValue).joined(separator: ", "))"
        }
        if let refundPreference, !RefundPreference.knownValues.contains(refundPreference) {
            return
                "refundPreference \(UntrustedText.quoted(refundPreference.rawValue, limit: 40)) is not one of \(RefundPreference.knownValues.map(\.rawValue).joined(separator: ", "))"
        }
        if let percentage = consumptionPercentage {
            guard (0...100_000).contains(percentage) else { return "consumptionPercentage is in milliunits, from 0 to 100000 (50 % is 50000)" }
            if deliveryStatus != .delivered, percentage != 0 { return "consumptionPercentage must be 0 when deliveryStatus is not DELIVERED" }
        }
        if refundPreference == .grantProrated, !(1...99_999).contains(consumptionPercentage ?? 0) {
            return "GRANT_PRORATED needs a consumptionPercentage from 1 to 99999"
        }
        return nil
    }

    /// The request body for a purchase of `productType` (Apple refuses a percentage for auto-renewables: it is left
    /// out there).
    package func request(for productType: ProductType?) -> ConsumptionRequest {
        ConsumptionRequest(
            customerConsented: true, deliveryStatus: deliveryStatus, sampleContentProvided: sampleContentProvided,
            consumptionPercentage: productType == .autoRenewable ? nil : consumptionPercentage, refundPreference: refundPreference)
    }
}

/// What a policy decides from: the purchase, the request, and what the ledger knows of the customer.
package struct ConsumptionFacts: Codable, Hashable, Sendable {
    package var productType: ProductType
    package var productId: String
    package var reason: ConsumptionRequestReason?
    /// Days since the customer's first purchase in the app and environment (0 when this is it).
    package var tenureDays: Int
    /// The customer's purchases refunded before this request (this one not counted).
    package var refunds: Int
    /// The part of the purchase's period that had passed when the refund was asked for, in percent; nil for purchases
    /// without a period (consumables, non-consumables).
    package var consumedPercent: Double?
    package var consented: Bool

    package init(
        productType: ProductType, productId: String, reason: ConsumptionRequestReason?, tenureDays: Int, refunds: Int, consumedPercent: Double?,
        consented: Bool
    ) {
        self.productType = productType
        self.productId = productId
        self.reason = reason
        self.tenureDays = tenureDays
        self.refunds = refunds
        self.consumedPercent = consumedPercent
        self.consented = consented
    }

    /// The facts of `transaction`'s refund request asked at `requestedAt`, from `transactions` (the customer's, in
    /// the app and environment).
    package static func of(
        _ transaction: TransactionInfo, reason: ConsumptionRequestReason?, requestedAt: Date, customerTransactions: [TransactionInfo], consented: Bool
    ) -> ConsumptionFacts {
        let first = min(customerTransactions.map(\.purchaseDate).min() ?? transaction.purchaseDate, transaction.purchaseDate)
        let tenure = max(0, Int(requestedAt.timeIntervalSince(first) / 86_400))
        let refunds = customerTransactions.filter {
            $0.transactionId != transaction.transactionId && $0.revocationDate.map { $0 <= requestedAt } == true
                && $0.inAppOwnershipType != .familyShared
        }.count
        var consumed: Double?
        let start = transaction.purchaseDate
        if let end = transaction.expiresDate, end > start {
            consumed = min(100, max(0, requestedAt.timeIntervalSince(start) / end.timeIntervalSince(start) * 100))
        }
        return ConsumptionFacts(
            productType: transaction.type, productId: transaction.productId, reason: reason, tenureDays: tenure, refunds: refunds,
            consumedPercent: consumed, consented: consented)
    }
}
