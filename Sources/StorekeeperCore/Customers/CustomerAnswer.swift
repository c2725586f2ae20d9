package import AppStoreModels
package import Foundation

/// What a read of one customer of one app in one environment answers: their entitlements (each with the transaction
/// and notification behind it), subscriptions, non-consumables and consumable balances, and until when that holds
/// with no new data. A plain value; the server writes it as JSON (its `Encodable` form is the reference layout).
package struct CustomerAnswer: Codable, Hashable, Sendable {
    /// One auto-renewable subscription: its latest transaction, status and renewal info.
    package struct Subscription: Codable, Hashable, Sendable {
        package var originalTransactionId: String
        package var productId: String
        package var status: Int?
        package var expiresDate: Date?
        package var autoRenew: Bool?
        package var autoRenewProductId: String?
        package var gracePeriodExpiresDate: Date?
        package var isInBillingRetryPeriod: Bool?
        package var ownership: String
        /// The notification that set ``status``.
        package var statusFromNotification: String?
    }

    package var customerId: String
    package var bundleId: String
    /// `Sandbox` or `Production`.
    package var environment: String
    package var entitlements: [Entitlement]
    package var subscriptions: [Subscription]
    /// Product IDs of non-consumables owned and not refunded, sorted.
    package var nonConsumables: [String]
    package var consumableBalance: [String: Int]
    /// When the answer changes by itself (the next expiry of a subscription, grace period or non-renewing term);
    /// `nil` when nothing will. Not part of the encoded answer.
    package var validUntil: Date?

    private enum CodingKeys: String, CodingKey {
        case customerId, bundleId, environment, entitlements, subscriptions, nonConsumables, consumableBalance
    }

    /// An answer read back from its JSON (an event's state): ``validUntil`` is not part of it and reads as `nil`.
    package init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        customerId = try container.decode(String.self, forKey: .customerId)
        bundleId = try container.decode(String.self, forKey: .bundleId)
        environment = try container.decode(String.self, forKey: .environment)
        entitlements = try container.decode([Entitlement].self, forKey: .entitlements)
        subscriptions = try container.decode([Subscription].self, forKey: .subscriptions)
        nonConsumables = try container.decode([String].self, forKey: .nonConsumables)
        consumableBalance = try container.decode([String: Int].self, forKey: .consumableBalance)
        validUntil = nil
    }

    /// The answer for `customerId` from their ledger, narrowed to one app, at `now`.
    package init(
        for customerId: String, in ledger: Ledger, bundleId: String, environment: AppStoreEnvironment, configuration: EntitlementConfiguration,
        at now: Date
    ) {
        let owned = ledger.transactions(of: customerId, environment: environment)
        let latest = EntitlementEngine.latestPerSubscription(owned)
        let (state, nextChange) = EntitlementEngine(configuration: configuration).evaluate(
            customerId, owning: owned, latest: latest, in: ledger, environment: environment, at: now)
        self.init(state: state, owned: owned, latest: latest, ledger: ledger, bundleId: bundleId, validUntil: nextChange)
    }

    /// The answer from an evaluated state and the ledger it came from.
    package init(state: CustomerState, ledger: Ledger, bundleId: String, validUntil: Date?) {
        self.init(
            state: state, owned: ledger.transactions(of: state.customerId, environment: state.environment), ledger: ledger, bundleId: bundleId,
            validUntil: validUntil)
    }

    /// `owned`: the customer's transactions in the environment (``Ledger/transactions(of:environment:)``). The ledger
    /// read for a customer also holds families that carry one of their tokens but are someone else's (moved by the
    /// `transfer` restore policy): their details are not this customer's to see.
    init(state: CustomerState, owned: [LedgerTransaction], ledger: Ledger, bundleId: String, validUntil: Date?) {
        self.init(
            state: state, owned: owned, latest: EntitlementEngine.latestPerSubscription(owned), ledger: ledger, bundleId: bundleId,
            validUntil: validUntil)
    }

    /// `latest`: the latest transaction of each of the customer's subscriptions (``EntitlementEngine/latestPerSubscription(_:)``
    /// of `owned`).
    init(
        state: CustomerState, owned: [LedgerTransaction], latest: [String: LedgerTransaction], ledger: Ledger, bundleId: String,
        validUntil: Date?
    ) {
        customerId = state.customerId
        self.bundleId = bundleId
        environment = state.environment.rawValue
        entitlements = state.entitlements
        consumableBalance = state.consumableBalance
        self.validUntil = validUntil
        nonConsumables = Set(owned.filter { $0.info.type == .nonConsumable && $0.info.revocationDate == nil }.map(\.info.productId)).sorted()
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
