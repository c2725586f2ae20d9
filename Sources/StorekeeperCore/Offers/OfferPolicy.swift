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

    /// What the ledger knows of a customer, for one product and offer.
    package struct Facts: Codable, Hashable, Sendable {
        /// The product's subscription group, when known.
        package var group: String?
        package var subscribed: Bool
        package var lapsed: Bool
        /// Whether any transaction of theirs in the group had an introductory offer.
        package var hadIntroductoryOffer: Bool
        /// Their transactions with this offer's identifier.
        package var redemptions: Int
        /// Their latest transaction in the app (what a signed request names), if any.
        package var latestTransactionId: String?

        package init(group: String?, subscribed: Bool, lapsed: Bool, hadIntroductoryOffer: Bool, redemptions: Int, latestTransactionId: String?) {
            self.group = group
            self.subscribed = subscribed
            self.lapsed = lapsed
            self.hadIntroductoryOffer = hadIntroductoryOffer
            self.redemptions = redemptions
            self.latestTransactionId = latestTransactionId
        }
    }

    /// The facts for `customerId` in `ledger` (the customer's part of the ledger in one app and environment).
    package func facts(ledger: Ledger, customerId: String, bundleId: String, productId: String, offerId: String?, now: Date) -> Facts {
        let mine = ledger.transactions.values.filter { $0.info.bundleId == bundleId && ledger.customer(of: $0) == customerId }.map(\.info)
        let configured = subscriptionGroups.first { $0.value.contains(productId) }
        let group = configured?.key ?? mine.first { $0.productId == productId }?.subscriptionGroupIdentifier
        func inGroup(_ info: TransactionInfo) -> Bool {
            guard info.type == .autoRenewable else { return false }
            if let configured, configured.value.contains(info.productId) { return true }
            if let group, info.subscriptionGroupIdentifier == group { return true }
            return info.productId == productId
        }
        let groupTransactions = mine.filter(inGroup)
        let subscribed = groupTransactions.contains { info in
            info.revocationDate == nil && (info.expiresDate.map { $0 > now } ?? false)
        }
        return Facts(
            group: group, subscribed: subscribed, lapsed: !subscribed && !groupTransactions.isEmpty,
            hadIntroductoryOffer: groupTransactions.contains { $0.offerType == .introductory },
            redemptions: offerId.map { id in mine.filter { $0.offerIdentifier == id }.count } ?? 0,
            latestTransactionId: mine.max { ($0.purchaseDate, $0.transactionId) < ($1.purchaseDate, $1.transactionId) }?.transactionId)
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
                    : "offer \(offerId) is for lapsed subscribers, and the customer never subscribed to the group (rules[\(index)])")
        case .new where facts.subscribed || facts.lapsed:
            return .refused(
                code: "offer-not-eligible", reason: "offer \(offerId) is for customers who never subscribed to the group (rules[\(index)])")
        default: break
        }
        if rule.oncePerCustomer, facts.redemptions > 0 {
            return .refused(
                code: "offer-redeemed-already",
                reason: "offer \(offerId) is once per customer, and the customer redeemed it already (rules[\(index)])")
        }
        return .allowed(rule: index)
    }
}
