public import AppStoreModels
public import Foundation

/// What a read of one customer of one app in one environment answers: their entitlements (each with the transaction
/// and notification behind it), subscriptions, non-consumables and consumable balances, and until when that holds
/// with no new data. A plain value; the server writes it as JSON (its `Encodable` form is the reference layout).
public struct CustomerAnswer: Encodable, Hashable, Sendable {
    /// One auto-renewable subscription: its latest transaction, status and renewal info.
    public struct Subscription: Encodable, Hashable, Sendable {
        public var originalTransactionId: String
        public var productId: String
        public var status: Int?
        public var expiresDate: Date?
        public var autoRenew: Bool?
        public var autoRenewProductId: String?
        public var gracePeriodExpiresDate: Date?
        public var isInBillingRetryPeriod: Bool?
        public var ownership: String
        /// The notification that set ``status``.
        public var statusFromNotification: String?
    }

    public var customerId: String
    public var bundleId: String
    /// `Sandbox` or `Production`.
    public var environment: String
    public var entitlements: [Entitlement]
    public var subscriptions: [Subscription]
    /// Product IDs of non-consumables owned and not refunded, sorted.
    public var nonConsumables: [String]
    public var consumableBalance: [String: Int]
    /// When the answer changes by itself (the next expiry of a subscription, grace period or non-renewing term);
    /// `nil` when nothing will. Not part of the encoded answer.
    public var validUntil: Date?

    private enum CodingKeys: String, CodingKey {
        case customerId, bundleId, environment, entitlements, subscriptions, nonConsumables, consumableBalance
    }

    /// The answer for `customerId` from their ledger, narrowed to one app, at `now`.
    public init(for customerId: String, in ledger: Ledger, bundleId: String, environment: AppStoreEnvironment, configuration: EntitlementConfiguration, at now: Date) {
        let (state, nextChange) = EntitlementEngine(configuration: configuration).evaluate(customerId, in: ledger, environment: environment, at: now)
        self.init(state: state, ledger: ledger, bundleId: bundleId, validUntil: nextChange)
    }

    /// The answer from an evaluated state and the ledger it came from.
    public init(state: CustomerState, ledger: Ledger, bundleId: String, validUntil: Date?) {
        customerId = state.customerId
        self.bundleId = bundleId
        environment = state.environment.rawValue
        entitlements = state.entitlements
        consumableBalance = state.consumableBalance
        self.validUntil = validUntil
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
