package import AppStoreModels
package import Foundation

/// Which subscription offers (promotional and win-back, signed by the developer's server) a customer may get, judged
/// on what the ledger knows of them: the first rule naming the offer (and the product and environment, when it
/// names them) decides; an offer no rule names is refused. Also what introductory-offer eligibility is decided on.
package struct OfferPolicy: Codable, Hashable, Sendable {
    /// Who a rule is for, by their subscriptions in the product's subscription group.
    package enum Audience: String, Codable, Hashable, Sendable, CaseIterable {
        /// Anyone.
        case any
        /// Customers with a subscription of the group in service now.
        case subscribed
        /// Customers who had a subscription of the group and have none in service (win-back offers).
        case lapsed
        /// Customers who never had a subscription of the group.
        case new

        package init(from decoder: any Decoder) throws {
            let text = try decoder.singleValueContainer().decode(String.self)
            guard let audience = Audience(rawValue: text) else {
                throw DecodingError.dataCorrupted(
                    .init(
                        codingPath: decoder.codingPath,
                        debugDescription:
                            "\(UntrustedText.quoted(text, limit: 32)) is not an audience: give \"any\", \"subscribed\", \"lapsed\" or \"new\""
                    ))
            }
            self = audience
        }
    }

    /// One rule.
    package struct Rule: Codable, Hashable, Sendable {
        /// The offer's identifier in App Store Connect.
        package var offerId: String
        /// The products it is for; absent: any.
        package var productIds: [String]?
        package var customers: Audience
        /// At most one redemption of the offer per customer (a transaction of theirs with this `offerIdentifier`).
        package var oncePerCustomer: Bool
        /// The environments it applies in; absent: every one.
        package var environments: [AppStoreEnvironment]?

        package init(
            offerId: String, productIds: [String]? = nil, customers: Audience = .any, oncePerCustomer: Bool = false,
            environments: [AppStoreEnvironment]? = nil
        ) {
            self.offerId = offerId
            self.productIds = productIds
            self.customers = customers
            self.oncePerCustomer = oncePerCustomer
            self.environments = environments
        }

        private enum CodingKeys: String, CodingKey { case offerId, productIds, customers, oncePerCustomer, environments }

        package init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            self.init(
                offerId: try container.decode(String.self, forKey: .offerId),
                productIds: try container.decodeIfPresent([String].self, forKey: .productIds),
                customers: try container.decodeIfPresent(Audience.self, forKey: .customers) ?? .any,
                oncePerCustomer: try container.decodeIfPresent(Bool.self, forKey: .oncePerCustomer) ?? false,
                environments: try container.decodeIfPresent([AppStoreEnvironment].self, forKey: .environments))
        }
    }

    package var rules: [Rule]
    /// Subscription groups by their identifier: the product IDs of each (so that a customer's standing in a group is
    /// known for a product they never bought). A product in none is judged with the group its transactions in the
    /// ledger name, or alone.
    package var subscriptionGroups: [String: [String]]

    package init(rules: [Rule] = [], subscriptionGroups: [String: [String]] = [:]) {
        self.rules = rules
        self.subscriptionGroups = subscriptionGroups
    }

    private enum CodingKeys: String, CodingKey { case rules, subscriptionGroups }

    package init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.init(
            rules: try container.decodeIfPresent([Rule].self, forKey: .rules) ?? [],
            subscriptionGroups: try container.decodeIfPresent([String: [String]].self, forKey: .subscriptionGroups) ?? [:])
    }

    /// Whether `value` can name a product or an offer: 1-256 printable characters, no spaces, no U+2063 (the V1
    /// payload's separator).
    package static func isIdentifier(_ value: String) -> Bool {
        (1...256).contains(value.utf8.count)
            && value.unicodeScalars.allSatisfy { scalar in
                scalar.value > 0x20 && !(0x7F...0x9F).contains(scalar.value) && !UntrustedText.needsEscape(scalar)
                    && !scalar.properties.isWhitespace
            }
    }

    /// The first mistake of the policy, if any, with the setting it is in: a rule that could never match (an
    /// identifier no request can give, an empty product list, an environment that does not exist) or a product in
    /// two subscription groups (which group it is in would depend on the order a dictionary is read in).
    package func problem() -> (setting: String, message: String)? {
        for (index, rule) in rules.enumerated() {
            let at = "rules[\(index)]"
            guard Self.isIdentifier(rule.offerId) else {
                return (
                    "\(at).offerId",
                    "\(at).offerId \(UntrustedText.quoted(rule.offerId, limit: 64)) is not an offer identifier (1-256 printable characters, no spaces)"
                )
            }
            if let products = rule.productIds {
                guard !products.isEmpty else { return ("\(at).productIds", "\(at).productIds is empty: leave it out for every product") }
                if let bad = products.first(where: { !Self.isIdentifier($0) }) {
                    return ("\(at).productIds", "\(at).productIds holds \(UntrustedText.quoted(bad, limit: 64)), not a product identifier")
                }
            }
            if let environments = rule.environments {
                guard !environments.isEmpty else { return ("\(at).environments", "\(at).environments is empty: leave it out for every environment") }
                if let bad = environments.first(where: { ![.production, .sandbox].contains($0) }) {
                    return (
                        "\(at).environments",
                        "\(at).environments holds \(UntrustedText.quoted(bad.rawValue, limit: 32)): offers are signed for \"Production\" and \"Sandbox\""
                    )
                }
            }
        }
        var groupOf: [String: String] = [:]
        for (group, products) in subscriptionGroups.sorted(by: { $0.key < $1.key }) {
            guard Self.isIdentifier(group), !products.isEmpty else {
                return (
                    "subscriptionGroups", "subscriptionGroups \(UntrustedText.quoted(group, limit: 64)) needs an identifier and at least one product"
                )
            }
            for product in products {
                guard Self.isIdentifier(product) else {
                    return (
                        "subscriptionGroups",
                        "subscriptionGroups \(group) holds \(UntrustedText.quoted(product, limit: 64)), not a product identifier"
                    )
                }
                if let other = groupOf.updateValue(group, forKey: product), other != group {
                    return ("subscriptionGroups", "product \(product) is in two subscription groups, \(other) and \(group): a product is in one")
                }
            }
        }
        // The groups list every product offers are for: a rule's product in none is a typo, or another app's.
        if !groupOf.isEmpty {
            for (index, rule) in rules.enumerated() {
                if let stray = rule.productIds?.first(where: { groupOf[$0] == nil }) {
                    return (
                        "rules[\(index)].productIds",
                        "rules[\(index)].productIds holds \(UntrustedText.quoted(stray, limit: 64)), in no group of subscriptionGroups (which lists every product of the app's subscription groups)"
                    )
                }
            }
        }
        return nil
    }

    /// What the ledger knows of a customer, for one product and offer.
    package struct Facts: Codable, Hashable, Sendable {
        /// The product's subscription group, when known.
        package var group: String?
        package var subscribed: Bool
        package var lapsed: Bool
        /// A subscription of theirs in the group is in billing retry (neither in service nor lapsed).
        package var inBillingRetry = false
        /// Whether any transaction of theirs in the group had an introductory offer.
        package var hadIntroductoryOffer: Bool
        /// Their transactions with this offer's identifier.
        package var redemptions: Int
        /// Their latest transaction in the app (what a signed request names), if any.
        package var latestTransactionId: String?
        /// Every transaction ID of theirs in the app (a V2 signature may name only one of these).
        package var transactionIds: Set<String>
        /// When a signature of this offer, still valid, was issued to them (set by the caller from the audit log).
        package var outstandingSignature: Date?

        package init(
            group: String?, subscribed: Bool, lapsed: Bool, hadIntroductoryOffer: Bool, redemptions: Int, latestTransactionId: String?,
            transactionIds: Set<String> = [], outstandingSignature: Date? = nil
        ) {
            self.group = group
            self.subscribed = subscribed
            self.lapsed = lapsed
            self.hadIntroductoryOffer = hadIntroductoryOffer
            self.redemptions = redemptions
            self.latestTransactionId = latestTransactionId
            self.transactionIds = transactionIds
            self.outstandingSignature = outstandingSignature
        }
    }

    /// The facts for `customerId` in `ledger` (the customer's part of the ledger in one app and environment). A
    /// subscription is in service while its latest transaction has not expired (and was not revoked), or while its
    /// billing grace period lasts; in billing retry it is neither in service nor lapsed.
    package func facts(ledger: Ledger, customerId: String, bundleId: String, productId: String, offerId: String?, now: Date) -> Facts {
        let mine = ledger.transactions.values.filter { $0.info.bundleId == bundleId && ledger.customer(of: $0) == customerId }.map(\.info)
        let configured = subscriptionGroups.sorted { $0.key < $1.key }.first { $0.value.contains(productId) }
        let group = configured?.key ?? mine.first { $0.productId == productId }?.subscriptionGroupIdentifier
        func inGroup(_ info: TransactionInfo) -> Bool {
            guard info.type == .autoRenewable else { return false }
            if let configured, configured.value.contains(info.productId) { return true }
            if let group, info.subscriptionGroupIdentifier == group { return true }
            return info.productId == productId
        }
        let groupTransactions = mine.filter(inGroup)
        var inService = false
        var retrying = false
        for (original, transactions) in Dictionary(grouping: groupTransactions, by: \.originalTransactionId) {
            guard let latest = transactions.max(by: { ($0.purchaseDate, $0.transactionId) < ($1.purchaseDate, $1.transactionId) }),
                let environment = latest.environment
            else { continue }
            let subscription = ledger.subscriptions[LedgerKey(environment, original)]
            let renewal = subscription?.renewalInfo
            if latest.revocationDate == nil, latest.expiresDate.map({ $0 > now }) ?? false {
                inService = true
            } else if latest.revocationDate == nil, let grace = renewal?.gracePeriodExpiresDate, grace > now {
                inService = true
            } else if latest.revocationDate == nil, subscription?.status == .billingRetry || renewal?.isInBillingRetryPeriod == true {
                retrying = true
            }
        }
        var facts = Facts(
            group: group, subscribed: inService, lapsed: !inService && !retrying && !groupTransactions.isEmpty,
            hadIntroductoryOffer: groupTransactions.contains { $0.offerType == .introductory },
            redemptions: offerId.map { id in mine.filter { $0.offerIdentifier == id }.count } ?? 0,
            latestTransactionId: mine.max { ($0.purchaseDate, $0.transactionId) < ($1.purchaseDate, $1.transactionId) }?.transactionId,
            transactionIds: Set(mine.map(\.transactionId)))
        facts.inBillingRetry = !inService && retrying
        return facts
    }

    /// What the policy says of an offer.
    package enum Decision: Hashable, Sendable {
        /// Allowed by the rule at this index.
        case allowed(rule: Int)
        /// Refused: a stable code and why, in words.
        case refused(code: String, reason: String)
    }

    package func decide(offerId: String, productId: String, environment: AppStoreEnvironment, facts: Facts) -> Decision {
        let matching = rules.indices.filter { index in
            let rule = rules[index]
            return rule.offerId == offerId && (rule.productIds?.contains(productId) ?? true) && (rule.environments?.contains(environment) ?? true)
        }
        guard let index = matching.first else {
            return .refused(
                code: "offer-not-allowed",
                reason: "no rule of the offer policy names offer \(offerId) for product \(productId) in \(environment.rawValue)")
        }
        let rule = rules[index]
        switch rule.customers {
        case .any: break
        case .subscribed where !facts.subscribed:
            return .refused(code: "offer-not-eligible", reason: "offer \(offerId) is for customers subscribed to the group now (rules[\(index)])")
        case .lapsed where !facts.lapsed:
            return .refused(
                code: "offer-not-eligible",
                reason: facts.subscribed
                    ? "offer \(offerId) is for lapsed subscribers, and the customer is subscribed (rules[\(index)])"
                    : facts.inBillingRetry
                        ? "offer \(offerId) is for lapsed subscribers, and the customer's subscription is in billing retry (rules[\(index)])"
                        : "offer \(offerId) is for lapsed subscribers, and the customer never subscribed to the group (rules[\(index)])")
        case .new where facts.subscribed || facts.lapsed || facts.inBillingRetry:
            return .refused(
                code: "offer-not-eligible", reason: "offer \(offerId) is for customers who never subscribed to the group (rules[\(index)])")
        default: break
        }
        if rule.oncePerCustomer, facts.redemptions > 0 {
            return .refused(
                code: "offer-redeemed-already",
                reason: "offer \(offerId) is once per customer, and the customer redeemed it already (rules[\(index)])")
        }
        if rule.oncePerCustomer, let issued = facts.outstandingSignature {
            return .refused(
                code: "offer-signature-outstanding",
                reason:
                    "offer \(offerId) is once per customer, and a signature issued to them at \(issued.formatted(.iso8601)) can still be redeemed (for 24 hours) (rules[\(index)])"
            )
        }
        return .allowed(rule: index)
    }
}
